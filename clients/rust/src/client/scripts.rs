//! The calls of SPEC E on a [`TbClient`]: the choice of the backend (E1), the loads (E2),
//! and every TB.* call through the backend chosen, with E3's one reload and E4's one fresh
//! id, each retried once inside the one call (so the limiter's guarded call sees only the
//! outcome: a reload that succeeds is never a store error). `backend.rs` says how a
//! module command becomes the scripts' call.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::clock::Clock;
use crate::error::Error;

use super::args::num;
use super::backend::{
    Backend, BackendSetting, Chosen, ScriptsVia, fresh_id, id_held, is_grant, library_gone,
    reply_text, script_args, word,
};
use super::connection::{TbClient, words};
use super::lua;

impl TbClient {
    /// SPEC E1: the backend chosen, `None` until it is (at startup, or before a degraded or
    /// lazy start's first call).
    pub fn backend(&self) -> Option<&Chosen> {
        self.inner.chosen.get()
    }

    /// Uses the scripts, called `via`, without asking the server (a caller that knows, or a
    /// test): `client_clock` sends the client's clock with each call (E5). `false` when a
    /// backend was already chosen (it stays).
    pub fn use_scripts(&self, via: ScriptsVia, client_clock: bool) -> bool {
        let why = format!("forced by backend={}", BackendSetting::Scripts);
        self.inner
            .chosen
            .set(Chosen::scripts(&self.inner.addr, &why, via, client_clock))
            .is_ok()
    }

    /// The clock sent as `now` / `NOW` where the server refuses TIME in scripts (SPEC E5,
    /// T1; default the system clock): a limiter's injected clock, in tests.
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        let mut guard = self.inner.clock.write().unwrap_or_else(|e| e.into_inner());
        *guard = clock;
    }

    /// SPEC E1, E2, E5: chooses the backend once (concurrent callers wait for one choice;
    /// a failed one lets the next call try again), each call within `limit`. A limiter logs
    /// E6's line ([`crate::RateLimiter::startup`]).
    pub(crate) async fn choose(&self, limit: Duration) -> Result<Chosen, Error> {
        if let Some(c) = self.inner.chosen.get() {
            return Ok(c.clone());
        }
        let _one = tokio::time::timeout(limit, self.inner.choosing.lock())
            .await
            .map_err(|_| self.timeout(limit))?;
        if let Some(c) = self.inner.chosen.get() {
            return Ok(c.clone());
        }
        let chosen = self.choice(limit).await?;
        Ok(self.inner.chosen.get_or_init(|| chosen).clone())
    }

    async fn choice(&self, limit: Duration) -> Result<Chosen, Error> {
        let addr = &self.inner.addr;
        let setting = self.inner.config.backend;
        let why = match setting {
            BackendSetting::Scripts => "forced by backend=scripts",
            BackendSetting::Auto | BackendSetting::Module => {
                let found = self.module_loaded(limit).await?;
                match (found, setting) {
                    (true, BackendSetting::Module) => {
                        return Ok(Chosen::module(addr, "forced by backend=module"));
                    }
                    (true, _) => return Ok(Chosen::module(addr, "tb.take found")),
                    (false, BackendSetting::Module) => {
                        return Err(Error::ModuleNotLoaded { addr: addr.clone() });
                    }
                    (false, _) => "tb.take not found",
                }
            }
        };
        let via = self.load(None, limit).await?;
        // SPEC E5: probed once; an error reply is a server that refuses TIME in scripts.
        let mut probe = redis::cmd("EVAL");
        probe.arg("return redis.call('TIME')").arg(0);
        let client_clock = match self.startup_query(&probe, limit).await {
            Ok(_) => false,
            Err(Error::Server { .. }) => true,
            Err(e) => return Err(e),
        };
        Ok(Chosen::scripts(addr, why, via, client_clock))
    }

    /// SPEC E2: loads the library, `via` the way already chosen (a reload, E3) or `None`
    /// at the choice (`FUNCTION LOAD REPLACE` where accepted, else `SCRIPT LOAD`, whose
    /// reply must be tb.lua's SHA-1). The last load's error reply is
    /// [`Error::ScriptLoad`]; a connection error or a timeout is passed through.
    async fn load(&self, via: Option<ScriptsVia>, limit: Duration) -> Result<ScriptsVia, Error> {
        let refused = |e: Error| match reply_text(&e) {
            Some(reason) => Error::ScriptLoad {
                addr: self.inner.addr.clone(),
                reason,
            },
            None => e,
        };
        if via != Some(ScriptsVia::Evalsha) {
            let mut cmd = redis::cmd("FUNCTION");
            cmd.arg("LOAD").arg("REPLACE").arg(lua::functions());
            match self.startup_query(&cmd, limit).await {
                Ok(_) => return Ok(ScriptsVia::Functions),
                Err(e) if via == Some(ScriptsVia::Functions) => return Err(refused(e)),
                Err(e @ Error::Server { .. }) => drop(e),
                Err(e) => return Err(e),
            }
        }
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(lua::script());
        let reply = self.startup_query(&cmd, limit).await.map_err(refused)?;
        let got = match &reply {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            other => format!("{other:?}"),
        };
        if !got.eq_ignore_ascii_case(lua::sha()) {
            return Err(Error::ScriptLoad {
                addr: self.inner.addr.clone(),
                reason: format!(
                    "SCRIPT LOAD answered {got}, not tb.lua's SHA-1 {}",
                    lua::sha()
                ),
            });
        }
        Ok(ScriptsVia::Evalsha)
    }

    /// One TB.* call (the module's words) through the backend, chosen first if it is not
    /// yet (a degraded or lazy start), within the call timeout.
    pub(crate) async fn call(&self, cmd: &Cmd) -> Result<Value, Error> {
        match self.inner.chosen.get() {
            Some(c) if c.backend == Backend::Module => self.call_once(cmd).await,
            // The scripts, or a choice to make first: boxed, so that the module's call
            // future stays as small as it was.
            _ => Box::pin(self.call_scripts(cmd)).await,
        }
    }

    async fn call_scripts(&self, cmd: &Cmd) -> Result<Value, Error> {
        let chosen = self.choose(self.inner.config.call_timeout).await?;
        let Some(mut via) = chosen.via else {
            return self.call_once(cmd).await;
        };
        let args = words(cmd);
        let grant = args.first().is_some_and(|n| is_grant(&word(n)));
        let mut id = if grant { Some(fresh_id()?) } else { None };
        let (mut reloaded, mut redrawn) = (false, false);
        loop {
            let now = chosen.client_clock.then(|| {
                let clock = self.inner.clock.read().unwrap_or_else(|e| e.into_inner());
                num(clock.unix())
            });
            let mut call = redis::Cmd::new();
            for a in script_args(via, &args, id.as_deref(), now.as_deref()) {
                call.arg(a);
            }
            match self.call_once(&call).await {
                // SPEC E3: one reload and one retry per call, never a loop.
                Err(e) if !reloaded && library_gone(&e) => {
                    reloaded = true;
                    via = self.load(Some(via), self.inner.config.call_timeout).await?;
                }
                // SPEC E4: once, with a fresh id.
                Err(e) if grant && !redrawn && id_held(&e) => {
                    redrawn = true;
                    id = Some(fresh_id()?);
                }
                other => return other,
            }
        }
    }
}
