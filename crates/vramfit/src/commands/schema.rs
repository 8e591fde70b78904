//! The JSON schemas of `--format json`, generated from the output types.
//!
//! Each command that prints JSON builds it from typed structs (`Serialize` + `JsonSchema`)
//! and its schema is `schemars::schema_for!` of the top-level one, generated here for the
//! serialize side (a key that is always written is required, null included; a key skipped
//! when empty is not) with every object closed (`additionalProperties: false`). The files
//! `docs/schema/<command>.schema.json` are these schemas, checked by the tests below:
//! `VRAMFIT_UPDATE_SCHEMA=1 cargo test -p vramfit schema` rewrites them. Each output carries
//! `schema_version`, bumped when a key changes meaning or goes away.

#[cfg(test)]
use schemars::generate::SchemaSettings;
#[cfg(test)]
use schemars::{JsonSchema, Schema};
use serde::Serialize;
#[cfg(test)]
use serde_json::Value;

/// Closes every object that lists its properties: a key not in the schema is an error, so a
/// new key cannot slip into the output without the schema (and its docs) saying so.
#[cfg(test)]
fn close_objects(schema: &mut Schema) {
    if let Some(obj) = schema.as_object_mut()
        && obj.contains_key("properties")
        && !obj.contains_key("additionalProperties")
    {
        obj.insert("additionalProperties".into(), Value::Bool(false));
    }
    schemars::transform::transform_subschemas(&mut close_objects, schema);
}

/// The schema of `T` as `docs/schema/<name>.schema.json` holds it (pretty, a final newline).
#[cfg(test)]
pub fn schema_text<T: JsonSchema>(name: &str, version: u32, description: &str) -> String {
    let generator = SchemaSettings::draft2020_12().for_serialize().into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    close_objects(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "$id".into(),
            format!("https://github.com/vramfit/vramfit/docs/schema/{name}.schema.json").into(),
        );
        obj.insert(
            "title".into(),
            format!("vramfit {name} --format json, schema_version {version}").into(),
        );
        obj.insert("description".into(), description.into());
    }
    // Through `Value` (a sorted map): the file's key order does not depend on field order.
    let value = serde_json::to_value(&schema).unwrap_or(Value::Null);
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}

/// Writes an output as pretty JSON and a newline, its keys sorted (as they always were).
pub fn write_json<T: Serialize>(out: &mut dyn std::io::Write, output: &T) -> std::io::Result<()> {
    let value = serde_json::to_value(output).map_err(std::io::Error::other)?;
    serde_json::to_writer_pretty(&mut *out, &value)?;
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    /// Compares a generated schema with the committed file (rewriting it when
    /// `VRAMFIT_UPDATE_SCHEMA` is set).
    #[track_caller]
    pub fn check(name: &str, text: &str) {
        let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/schema")
            .join(format!("{name}.schema.json"));
        if std::env::var_os("VRAMFIT_UPDATE_SCHEMA").is_some() {
            std::fs::write(&file, text).unwrap();
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            committed == text,
            "{} is not the schema of `vramfit {name} --format json`'s types; review the change, bump schema_version if a key changed meaning or went away, and regenerate with VRAMFIT_UPDATE_SCHEMA=1 cargo test -p vramfit schema",
            file.display()
        );
    }

    #[test]
    fn doctor_schema_is_generated_from_the_types() {
        check("doctor", &crate::commands::doctor::schema());
    }

    #[test]
    fn estimate_schema_is_generated_from_the_types() {
        check("estimate", &crate::commands::estimate::json::schema());
    }

    #[test]
    fn lint_schema_is_generated_from_the_types() {
        check(
            "lint",
            &super::schema_text::<vramfit_lint::render::JsonDocument<'static>>(
                "lint",
                vramfit_lint::render::JSON_SCHEMA_VERSION,
                "The findings, each with Ruff's JSON field names.",
            ),
        );
    }

    #[test]
    fn measure_schema_is_generated_from_the_types() {
        check("measure", &crate::commands::measure::json::schema());
    }

    #[test]
    fn plan_schema_is_generated_from_the_types() {
        check("plan", &crate::commands::plan::json::schema());
    }
}
