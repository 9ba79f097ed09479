//! The API's documentation and metrics: the OpenAPI document covers every
//! endpoint of the contract, Swagger UI is served from vendored assets, and the
//! metrics move with an order.
use crate::helpers::*;
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// Every endpoint of CONTRACT.md, as (method, path).
const CONTRACT: [(&str, &str); 20] = [
    ("post", "/api/v1/admin/vouchers"),
    ("get", "/api/v1/admin/vouchers/{id}"),
    ("post", "/api/v1/admin/vouchers/{id}/stock"),
    ("get", "/api/v1/admin/vouchers/{id}/audit"),
    ("post", "/api/v1/admin/vouchers/{id}/pause"),
    ("post", "/api/v1/admin/vouchers/{id}/resume"),
    ("get", "/admin/"),
    ("get", "/api/v1/vouchers"),
    ("get", "/api/v1/vouchers/{id}"),
    ("post", "/api/v1/vouchers/{id}/orders"),
    ("get", "/api/v1/orders/{order_id}"),
    ("get", "/api/v1/vouchers/{id}/orders/mine"),
    ("post", "/api/v1/orders/{order_id}/pay"),
    ("post", "/api/v1/orders/{order_id}/cancel"),
    ("put", "/api/v1/admin/sequences/{name}"),
    ("post", "/api/v1/sequences/{name}/next"),
    ("get", "/health/live"),
    ("get", "/health/ready"),
    ("get", "/metrics"),
    ("get", "/api-docs/openapi.json"),
];

/// Endpoints beyond the contract: for the admin console, and for operators of a
/// Redis repair.
const EXTRAS: [(&str, &str); 13] = [
    ("get", "/api/v1/admin/vouchers"),
    ("get", "/api/v1/admin/vouchers/{id}/live"),
    ("get", "/api/v1/admin/redis"),
    // Fair admission.
    ("get", "/api/v1/vouchers/{id}/challenge"),
    ("post", "/api/v1/vouchers/{id}/queue"),
    ("get", "/api/v1/vouchers/{id}/queue/me"),
    ("get", "/api/v1/vouchers/{id}/raffle"),
    ("post", "/api/v1/vouchers/{id}/raffle/entries"),
    ("get", "/api/v1/vouchers/{id}/raffle/entries"),
    ("get", "/api/v1/vouchers/{id}/raffle/me"),
    ("post", "/api/v1/vouchers/{id}/raffle/beacon"),
    ("get", "/api/v1/admin/vouchers/{id}/admission"),
    ("post", "/api/v1/admin/vouchers/{id}/admission"),
];

/// Checks `v` against an OpenAPI 3.1 schema: `$ref`, `allOf`, `oneOf`, `type`,
/// `enum`, `required`, `properties` (and no property the schema does not name),
/// `items`, bounds and lengths. Enough for the schemas utoipa writes; `pattern` is
/// left out (no regex engine here).
fn conform(doc: &Value, schema: &Value, v: &Value, at: &str, whole: bool, problems: &mut Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return conform(doc, &doc["components"]["schemas"][name], v, at, whole, problems);
    }
    if whole && v.is_object() {
        let mut named = BTreeSet::new();
        property_names(doc, schema, &mut named);
        for key in v.as_object().unwrap().keys().filter(|k| !named.contains(*k)) {
            problems.push(format!("{at}.{key} is not in the schema"));
        }
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        conform(doc, part, v, at, false, problems);
    }
    if let Some(choices) = schema["oneOf"].as_array() {
        let fits = choices
            .iter()
            .filter(|c| {
                let mut p = Vec::new();
                conform(doc, c, v, at, true, &mut p);
                p.is_empty()
            })
            .count();
        if fits != 1 {
            problems.push(format!("{at} fits {fits} of oneOf"));
        }
    }
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty()
        && !types
            .iter()
            .any(|t| *t == kind || (*t == "number" && kind == "integer"))
    {
        problems.push(format!("{at} is {kind}, not {types:?}"));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(v) {
            problems.push(format!("{at} = {v} is not one of {allowed:?}"));
        }
    }
    if let (Some(n), Some(min)) = (v.as_f64(), schema["minimum"].as_f64()) {
        if n < min {
            problems.push(format!("{at} = {n} < minimum {min}"));
        }
    }
    if let (Some(n), Some(max)) = (v.as_f64(), schema["maximum"].as_f64()) {
        if n > max {
            problems.push(format!("{at} = {n} > maximum {max}"));
        }
    }
    if let (Some(s), Some(min)) = (v.as_str(), schema["minLength"].as_u64()) {
        if (s.chars().count() as u64) < min {
            problems.push(format!("{at} is shorter than {min}"));
        }
    }
    if let (Some(s), Some(max)) = (v.as_str(), schema["maxLength"].as_u64()) {
        if s.chars().count() as u64 > max {
            problems.push(format!("{at} is longer than {max}"));
        }
    }
    if let Some(obj) = v.as_object() {
        for name in schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !obj.contains_key(name) {
                problems.push(format!("{at}.{name} is required"));
            }
        }
        for (name, sub) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(value) = obj.get(name) {
                conform(doc, sub, value, &format!("{at}.{name}"), true, problems);
            }
        }
    }
    if let (Some(items), Some(schema)) = (v.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conform(doc, schema, item, &format!("{at}[{i}]"), true, problems);
        }
    }
}

/// The properties a schema names, through `$ref`, `allOf` and `oneOf` (a nullable
/// object is `oneOf: [null, object]`).
fn property_names(doc: &Value, schema: &Value, names: &mut BTreeSet<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return property_names(doc, &doc["components"]["schemas"][name], names);
    }
    names.extend(
        schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone()),
    );
    for part in schema["allOf"].as_array().into_iter().flatten() {
        property_names(doc, part, names);
    }
    for part in schema["oneOf"].as_array().into_iter().flatten() {
        property_names(doc, part, names);
    }
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

mod admission;
mod routes;
mod schemas_and_metrics;
