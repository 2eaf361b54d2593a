"""The Parquet tables of ``amqpscope batch`` and ``decode --format parquet`` (see docs/batch.md)."""

# Parquet compression codecs offered (pyarrow's names). snappy is Spark's and DuckDB's default:
# on the tables of 100 MB of loopback capture it takes ~0.3 CPU-s less than zstd, for files about
# twice the size.
COMPRESSIONS = ("snappy", "zstd", "lz4", "none")
DEFAULT_COMPRESSION = "snappy"
