//! Parquet files of flow records and grouped packet vectors (arrow/parquet)
