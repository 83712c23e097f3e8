"""The chat room: conversations turned into a chat store's tokens and loss weights.

Its modules, in the order a conversation goes through them:

- `conversations`: the formats conversations are read from (messages, prompt and completion, other tools'
  field names), checked message by message;
- `jinja` and `template`: the chat template, a Jinja sandbox with transformers' semantics, and where its
  `{% generation %}` blocks land in the rendered text;
- `turns`: the assistant's turns of a template without generation blocks, found from renders of each
  conversation's beginnings;
- `options` and `recipe`: the recipe a store is built with (the template named once, the tokens trained);
- `build`: the one encode path, render, tokenize and mask;
- `stdlib`: the conversations made from the Python standard library that the default fine-tuning uses.

The package imports none of its modules: `import meltemi.datastore.chat.template` costs no Jinja until a
template renders.
"""
