//! The HTTP service around the sale: liveness and readiness (naming each dependency
//! that does not answer), the error body of malformed requests, authentication and
//! roles, voucher validation, stock top-ups, and a clean stop on SIGTERM.
use crate::fixtures::spawn_binary;
use crate::helpers::*;
use reqwest::StatusCode;
use seckill::app::Mode;
use serde_json::{json, Value};

mod health_and_errors;
mod identity;
mod start_and_stop;
