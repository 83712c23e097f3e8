"""A build's inputs: files, directories, globs, bucket prefixes and data sets resolved to files in a stable
order (`sources`), read as documents from text, JSON lines, JSON arrays (`json_array`), Parquet and Arrow
tables (`tables`), any of them compressed (`compression`); a data set's files chosen by split
(`dataset_files`) and subset (`dataset_card`)."""
