"""Data: loaders for the user's files and tables, parsing, the seeds' splits, the public data sets (MovieLens 100K, basket files) and side features. Imports nothing else from `validation`."""
