//! Serves the example app: `REDIS_URL` (default `redis://127.0.0.1:6379/`), `LISTEN`
//! (default `127.0.0.1:3000`), `TRUSTED_PROXIES` (comma-separated CIDRs), `FAIL_CLOSED=1`,
//! `SHADOW_POLICIES` (comma-separated policy names: `ip,user,orders,search`), `DENY_CACHE`
//! (max entries; 0 or unset: off), `LEGACY_HEADERS` (`unix` or `delta`),
//! `REDIS_TB_TIMEOUT_MS` (the Redis call timeout, default 50), `REDIS_TB_START_DEGRADED=1`
//! (start even when Redis is unreachable, SPEC U2; by default that fails the start),
//! `REDIS_TB_BACKEND` (SPEC E1: `auto`, the default, uses the module where it is loaded and
//! the script library of clients/lua elsewhere, e.g. on managed Redis; `module` or
//! `scripts` forces either; any other value prints one line and exits with status 2).
//!
//! A limiter that cannot start (Redis unreachable, the module missing where it is forced,
//! the script library refused, `COMMAND INFO` not permitted, a Redis Cluster refusing a
//! limiter without a tag function: SPEC U1-U3, E1, E2)
//! prints the one line of SPEC U4 and exits with status 3, as uvicorn and gunicorn do for
//! a failed start; any other error exits with status 1.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::ExitCode;

use std::time::Duration;

use redis_tb_axum_example::{Config, app_with_login, limiter, login_limiter};
use redis_tb_client::{BackendSetting, ClientConfig, FailureMode, LegacyReset, TbClient};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        // SPEC U4: the line, word for word, and status 3.
        Err(Failed::Start(line)) => {
            eprintln!("{line}");
            ExitCode::from(3)
        }
        // A setting that cannot be used: one line, status 2 (as the Node examples).
        Err(Failed::Setting(line)) => {
            eprintln!("{line}");
            ExitCode::from(2)
        }
        Err(Failed::Other(e)) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Why the app stopped: its limiters could not start (status 3), or anything else.
enum Failed {
    Start(String),
    Setting(String),
    Other(Box<dyn std::error::Error>),
}

impl<E: Into<Box<dyn std::error::Error>>> From<E> for Failed {
    fn from(e: E) -> Failed {
        Failed::Other(e.into())
    }
}

fn start_failed(e: impl std::fmt::Display) -> Failed {
    Failed::Start(e.to_string())
}

async fn run() -> Result<(), Failed> {
    // SPEC E1: checked before anything else.
    let backend: BackendSetting = match std::env::var("REDIS_TB_BACKEND") {
        Err(_) => BackendSetting::Auto,
        Ok(word) => word
            .parse()
            .map_err(|e| Failed::Setting(format!("REDIS_TB_BACKEND: {e}")))?,
    };
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let mut config = Config::default();
    if let Ok(proxies) = std::env::var("TRUSTED_PROXIES") {
        config.trusted_proxies = list(&proxies);
    }
    if std::env::var("FAIL_CLOSED").is_ok_and(|v| v == "1") {
        config.failure_mode = FailureMode::FailClosed;
    }
    if let Ok(names) = std::env::var("SHADOW_POLICIES") {
        config.shadow_policies = list(&names);
    }
    if let Ok(n) = std::env::var("DENY_CACHE") {
        config.deny_cache = n.trim().parse()?;
    }
    config.legacy_headers = match std::env::var("LEGACY_HEADERS").as_deref() {
        Ok("unix") => Some(LegacyReset::UnixTime),
        Ok("delta") => Some(LegacyReset::DeltaSeconds),
        Ok("") | Err(_) => None,
        Ok(other) => {
            return Err(format!("LEGACY_HEADERS={other:?}: use unix or delta").into());
        }
    };
    let mut client_config = ClientConfig {
        backend,
        ..ClientConfig::default()
    };
    if let Ok(ms) = std::env::var("REDIS_TB_TIMEOUT_MS") {
        let ms: u64 = ms.trim().parse()?;
        if ms == 0 {
            return Err("REDIS_TB_TIMEOUT_MS must be > 0 (SPEC C7)".into());
        }
        client_config.call_timeout = Duration::from_millis(ms);
    }
    // SPEC U1, U2, E1: fails here when Redis is unreachable, or runs without the module
    // where REDIS_TB_BACKEND=module forces it (auto chooses the scripts there). Only
    // REDIS_TB_START_DEGRADED=1 starts anyway (one line logged; the failure mode applies
    // until Redis answers).
    let client = if std::env::var("REDIS_TB_START_DEGRADED").is_ok_and(|v| v == "1") {
        TbClient::start_degraded(&url, client_config).await
    } else {
        TbClient::start(&url, client_config).await
    }
    .map_err(start_failed)?;
    let layer = limiter(client.clone(), &config).map_err(start_failed)?;
    let login = login_limiter(client, &config).map_err(start_failed)?;
    // SPEC U3: on a Redis Cluster, a limiter that sends several keys in one call needs a
    // tag function.
    layer.startup().await.map_err(start_failed)?;
    login.startup().await.map_err(start_failed)?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app_with_login(Some(layer), Some(login))
            .into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}
