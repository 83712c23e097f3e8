"""The compiled programs and what they run on: the train and eval steps, the optimizer and its schedules,
the mesh, and the persistent compilation cache."""
