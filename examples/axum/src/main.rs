//! Serves the example app: `REDIS_URL` (default `redis://127.0.0.1:6379/`), `LISTEN`
//! (default `127.0.0.1:3000`), `TRUSTED_PROXIES` (comma-separated CIDRs), `FAIL_CLOSED=1`,
//! `SHADOW_POLICIES` (comma-separated policy names: `ip,user,orders,search`), `DENY_CACHE`
//! (max entries; 0 or unset: off), `LEGACY_HEADERS` (`unix` or `delta`),
//! `REDIS_TB_TIMEOUT_MS` (the Redis call timeout, default 50).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::process::ExitCode;

use std::time::Duration;

use redis_tb_axum_example::{Config, app_with_login, limiter, login_limiter};
use redis_tb_client::{ClientConfig, FailureMode, LegacyReset, TbClient};

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
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
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
        Ok(other) => return Err(format!("LEGACY_HEADERS={other:?}: use unix or delta").into()),
    };
    // Fails here, at startup, when the server runs without the module. An unreachable
    // Redis is only logged: the app starts, and the failure mode applies until it answers.
    let mut client_config = ClientConfig::default();
    if let Ok(ms) = std::env::var("REDIS_TB_TIMEOUT_MS") {
        let ms: u64 = ms.trim().parse()?;
        if ms == 0 {
            return Err("REDIS_TB_TIMEOUT_MS must be > 0 (SPEC C7)".into());
        }
        client_config.call_timeout = Duration::from_millis(ms);
    }
    let client = TbClient::start(&url, client_config).await?;
    let layer = limiter(client.clone(), &config)?;
    let login = login_limiter(client, &config)?;
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
