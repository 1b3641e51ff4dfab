"""Tokenized input: the sources prepare-data reads, the prepared format, the tokenizer, the shipped offline assets."""
