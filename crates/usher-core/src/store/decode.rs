//! Reading values out of raw script replies. Redis turns Lua numbers into integers, Lua
//! strings into bulk strings and `false`/`nil` into nil; these helpers accept the forms a
//! value can take and return `None` (or a protocol error) for anything else.

use redis::Value;

use super::{protocol, Result};

pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

pub(super) fn float(v: &Value) -> Option<f64> {
    text(v)?.parse().ok()
}

/// An array reply (nil counts as empty).
pub(super) fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(protocol(format!("expected an array, got {other:?}"))),
    }
}

pub(super) fn u(v: &Value) -> Result<u64> {
    int(v)
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| protocol(format!("expected an integer, got {v:?}")))
}

/// The status a reply starts with (see [`super::reply`]), given the status type's
/// `from_code`; `None` when the reply starts with anything else.
pub(super) fn status<S>(reply: &[Value], from_code: fn(i64) -> Option<S>) -> Option<S> {
    reply.first().and_then(int).and_then(from_code)
}

/// Rate for ETAs: the measured one when known, else the configured one.
pub(super) fn rate_of(measured: &Value, configured: &Value) -> f64 {
    float(measured)
        .filter(|r| *r > 0.0)
        .or_else(|| float(configured))
        .unwrap_or(0.0)
}
