//! Arrow record batches from JSON rows: the few rows of a decode that Python makes (one
//! `captures` row per slice, an `errors` row, the `diagnoses`), in the table's schema.
//!
//! The rows are a JSON array of objects keyed by column name; a column a row does not have is
//! null, except `time`, which is the row's `ts` as the events' rows have it (`arrow::micros`).
//! Only the types those tables use are read: strings, int32/int64, doubles, bools, timestamps (integer microseconds), lists of int64, and map<string,string> given as an array
//! of `[key, value]` pairs (so that the entries keep their order). Anything else, or a value of
//! the wrong type, is an error naming the column.

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, TimestampMicrosecondArray};
use arrow_schema::{ArrowError, DataType, SchemaRef, TimeUnit};
use serde_json::{Map, Value};

use crate::arrow::{micros, string_map, MapColumn};

type Row = Map<String, Value>;

fn bad(column: &str, want: &str, got: &Value) -> ArrowError {
    ArrowError::ParseError(format!("column {column:?}: {want} expected, got {got}"))
}

/// `json`: an array of row objects, for `schema`.
pub fn batch_from_json(schema: SchemaRef, json: &[u8]) -> Result<RecordBatch, ArrowError> {
    let mut rows: Vec<Row> = serde_json::from_slice(json).map_err(|e| {
        ArrowError::ParseError(format!("rows are not a JSON array of objects: {e}"))
    })?;
    if schema.field_with_name("time").is_ok() {
        for row in &mut rows {
            // derived here as for the events' rows, not by the caller
            let ts = row.get("ts").and_then(Value::as_f64);
            if let (false, Some(ts)) = (row.contains_key("time"), ts) {
                row.insert("time".into(), micros(ts).into());
            }
        }
    }
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let values: Vec<&Value> = rows
            .iter()
            .map(|r| r.get(field.name()).unwrap_or(&Value::Null))
            .collect();
        columns.push(column(field.name(), field.data_type(), &values)?);
    }
    RecordBatch::try_new(schema, columns)
}

/// A column's integers (null stays None).
fn ints(name: &str, values: &[&Value]) -> Result<Vec<Option<i64>>, ArrowError> {
    let int = |v: &Value| v.as_i64().ok_or_else(|| bad(name, "an integer", v));
    values
        .iter()
        .map(|v| {
            if v.is_null() {
                Ok(None)
            } else {
                int(v).map(Some)
            }
        })
        .collect()
}

fn column(name: &str, dt: &DataType, values: &[&Value]) -> Result<ArrayRef, ArrowError> {
    Ok(match dt {
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::String(s) => b.append_value(s),
                    other => return Err(bad(name, "a string", other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int64 => Arc::new(Int64Array::from(ints(name, values)?)),
        DataType::Int32 => {
            let narrow = |(n, v): (Option<i64>, &&Value)| {
                n.map(i32::try_from)
                    .transpose()
                    .map_err(|_| bad(name, "an int32", v))
            };
            let ns = ints(name, values)?.into_iter().zip(values).map(narrow);
            Arc::new(Int32Array::from(ns.collect::<Result<Vec<_>, _>>()?))
        }
        DataType::Float64 => {
            let mut b = Float64Builder::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    other => {
                        b.append_value(other.as_f64().ok_or_else(|| bad(name, "a number", other))?)
                    }
                }
            }
            Arc::new(b.finish())
        }
        DataType::Boolean => {
            let mut b = BooleanBuilder::new();
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::Bool(x) => b.append_value(*x),
                    other => return Err(bad(name, "a bool", other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let micros = TimestampMicrosecondArray::from(ints(name, values)?);
            Arc::new(micros.with_data_type(dt.clone()))
        }
        DataType::List(item) if item.data_type() == &DataType::Int64 => {
            let mut b = ListBuilder::new(Int64Builder::new()).with_field(item.clone());
            for v in values {
                match v {
                    Value::Null => b.append_null(),
                    Value::Array(items) => {
                        let items: Vec<&Value> = items.iter().collect();
                        for x in ints(name, &items)? {
                            b.values().append_option(x);
                        }
                        b.append(true);
                    }
                    other => return Err(bad(name, "a list of integers", other)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Map(..) => map(name, dt, values)?,
        other => {
            return Err(ArrowError::SchemaError(format!(
                "column {name:?}: {other} is not read from JSON rows"
            )))
        }
    })
}

/// A map<string,string> column from `[[key, value], …]` arrays.
fn map(name: &str, dt: &DataType, values: &[&Value]) -> Result<ArrayRef, ArrowError> {
    let (entries, sorted) = string_map(name, dt)?;
    let mut m = MapColumn::new(entries, sorted);
    for v in values {
        let pairs = match v {
            Value::Null => None,
            Value::Array(pairs) => Some(
                pairs
                    .iter()
                    .map(|pair| match pair.as_array().map(Vec::as_slice) {
                        Some([Value::String(k), Value::String(x)]) => Ok((k.as_str(), x.as_str())),
                        _ => Err(bad(name, "[key, value] strings", pair)),
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            other => return Err(bad(name, "an array of [key, value] pairs", other)),
        };
        m.append_pairs(pairs)?;
    }
    m.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow::string_map_type;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMicrosecondType};
    use arrow_array::Array;
    use arrow_schema::{Field, Schema};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("s", DataType::Utf8, true),
            Field::new("n", DataType::Int32, true),
            Field::new("x", DataType::Float64, true),
            Field::new("ok", DataType::Boolean, true),
            Field::new(
                "t",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new(
                "l",
                DataType::List(Arc::new(Field::new("item", DataType::Int64, true))),
                true,
            ),
            Field::new("m", string_map_type(), true),
        ]))
    }

    #[test]
    fn rows_by_column() -> Result<(), ArrowError> {
        let json = br#"[{"s": "a", "n": 7, "x": 1.5, "ok": true, "t": 1700000000123456,
                         "l": [3, 4], "m": [["b", "2"], ["a", "1"]]},
                        {"n": null}]"#;
        let b = batch_from_json(schema(), json)?;
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.column(0).as_string::<i32>().value(0), "a");
        assert!(b.column(0).is_null(1) && b.column(6).is_null(1));
        let lists = b.column(5).as_list::<i32>();
        assert_eq!(lists.value(0).as_primitive::<Int64Type>().values(), &[3, 4]);
        let m = b.column(6).as_map();
        let keys: Vec<_> = m.keys().as_string::<i32>().iter().flatten().collect();
        assert_eq!(keys, ["b", "a"]); // in the order given
        assert_eq!(
            b.schema().field(4).data_type(),
            schema().field(4).data_type()
        );
        Ok(())
    }

    #[test]
    fn wrong_types_name_the_column() {
        for (json, column) in [
            (&br#"[{"s": 1}]"#[..], "\"s\""),
            (br#"[{"n": 4294967296}]"#, "\"n\""),
            (br#"[{"m": [["k"]]}]"#, "\"m\""),
            (br#"{"s": "not an array"}"#, "JSON array"),
        ] {
            let err = batch_from_json(schema(), json)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(column), "{err}");
        }
    }

    #[test]
    fn time_is_derived_from_ts() -> Result<(), ArrowError> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("ts", DataType::Float64, true),
            Field::new(
                "time",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
        ]));
        let b = batch_from_json(schema, br#"[{"ts": 1700000000.1234567}, {}]"#)?;
        let time = b.column(1).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(time.value(0), micros(1700000000.1234567));
        assert!(time.is_null(1));
        Ok(())
    }
}
