//! One table's Parquet file, encoded by arrow-rs' `parquet` into bytes in memory.
//!
//! The caller takes the bytes as they are made and writes them where the file goes (a local
//! file, or HDFS/S3 through pyarrow's filesystems in Python): the writer never seeks, so the
//! file is the concatenation of what `take` and `finish` return. What to encode how (codec,
//! dictionary, statistics and uncompressed columns, row group size) is the caller's choice (`FileOptions`,
//! filled from amqpscope/spark/worker.py), not decided here.

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

/// How the files of a run are encoded.
#[derive(Clone, Debug)]
pub struct FileOptions {
    /// "snappy", "zstd", "lz4" or "none".
    pub compression: String,
    /// Top-level columns written with dictionary encoding (the others: plain).
    pub dictionary: Vec<String>,
    /// Top-level columns with chunk statistics (min/max, nulls).
    pub statistics: Vec<String>,
    /// Top-level columns written without the codec: values that do not compress (hashes), where
    /// a codec pass costs CPU and saves nothing.
    pub uncompressed: Vec<String>,
    /// Rows per row group (the last one of a file may have fewer).
    pub row_group_rows: usize,
}

impl FileOptions {
    /// The codec named by `compression`; an unknown name is an error (before any file is made).
    pub fn codec(&self) -> Result<Compression, ParquetError> {
        Ok(match self.compression.as_str() {
            "snappy" => Compression::SNAPPY,
            // zstd's level 1: pyarrow's default, a fraction of the CPU of higher levels
            "zstd" => Compression::ZSTD(ZstdLevel::try_new(1)?),
            "lz4" => Compression::LZ4_RAW,
            "none" => Compression::UNCOMPRESSED,
            other => {
                return Err(ParquetError::General(format!(
                    "unknown Parquet compression {other:?}"
                )))
            }
        })
    }

    fn properties(&self, schema: &SchemaRef) -> Result<WriterProperties, ParquetError> {
        let mut b = WriterProperties::builder()
            .set_compression(self.codec()?)
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_max_row_group_row_count(Some(self.row_group_rows.max(1)))
            .set_created_by(format!("amqpscope {}", env!("CARGO_PKG_VERSION")));
        for field in schema.fields() {
            let name = field.name();
            if self.dictionary.iter().any(|c| c == name) {
                b = b.set_column_dictionary_enabled(ColumnPath::from(name.as_str()), true);
            }
            if self.uncompressed.iter().any(|c| c == name) {
                b = b.set_column_compression(
                    ColumnPath::from(name.as_str()),
                    Compression::UNCOMPRESSED,
                );
            }
            if self.statistics.iter().any(|c| c == name) {
                b = b.set_column_statistics_enabled(
                    ColumnPath::from(name.as_str()),
                    EnabledStatistics::Chunk,
                );
            }
        }
        Ok(b.build())
    }
}

/// A Parquet file under construction.
pub struct TableFile {
    writer: ArrowWriter<Vec<u8>>,
    rows: u64,
}

impl TableFile {
    pub fn new(schema: SchemaRef, options: &FileOptions) -> Result<TableFile, ParquetError> {
        let props = options.properties(&schema)?;
        Ok(TableFile {
            writer: ArrowWriter::try_new(Vec::new(), schema, Some(props))?,
            rows: 0,
        })
    }

    /// Encode `batch` (of the file's schema); a full row group is flushed to the bytes.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
        self.writer.write(batch)?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The bytes encoded since the last call that have left the writer's buffer: the file's
    /// next part (possibly empty).
    pub fn take(&mut self) -> Vec<u8> {
        // the writer counts the bytes it wrote itself and never reads them back
        std::mem::take(self.writer.inner_mut())
    }

    /// The last row group and the footer: the file's last part.
    pub fn finish(self) -> Result<Vec<u8>, ParquetError> {
        self.writer.into_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use std::sync::Arc;

    fn options(compression: &str) -> FileOptions {
        FileOptions {
            compression: compression.into(),
            dictionary: vec!["s".into()],
            statistics: vec!["n".into()],
            uncompressed: vec![],
            row_group_rows: 3,
        }
    }

    #[test]
    fn parts_make_the_file() -> Result<(), Box<dyn std::error::Error>> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, false),
            Field::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4, 5])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("a"),
                    Some("b"),
                    None,
                ])),
            ],
        )?;
        for codec in ["snappy", "zstd", "lz4", "none"] {
            let mut f = TableFile::new(schema.clone(), &options(codec))?;
            let mut bytes = Vec::new();
            for _ in 0..400 {
                f.write(&batch)?;
                bytes.extend(f.take()); // parts, as the writer's buffer fills
            }
            assert_eq!(f.rows(), 2000);
            assert!(!bytes.is_empty());
            bytes.extend(f.finish()?);
            let path = std::env::temp_dir().join(format!(
                "amqpscope-parquet-file-{}-{codec}.parquet",
                std::process::id()
            ));
            std::fs::write(&path, &bytes)?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path)?)?;
            let groups = reader.metadata().num_row_groups();
            let rows: usize = reader
                .build()?
                .map(|b| b.map(|b| b.num_rows()))
                .sum::<Result<_, _>>()?;
            std::fs::remove_file(&path)?;
            assert_eq!((rows, groups), (2000, 667), "{codec}"); // row groups of 3 rows
        }
        Ok(())
    }

    #[test]
    fn unknown_codec_is_an_error() {
        let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
        let err = TableFile::new(schema, &options("brotli9")).err();
        assert!(err.is_some_and(|e| e.to_string().contains("brotli9")));
    }
}
