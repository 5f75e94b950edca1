//! The shared vectors of `clients/vectors` (format: `clients/vectors/README.md`), run
//! against this crate: the pure files call the core's functions, `limiter.json` drives the
//! framework-neutral [`RateLimiter`] with a [`ManualClock`] and a scripted [`Store`] at the
//! level of the typed client; `limiter-scripts.json` (the same cases on the script backend,
//! SPEC E, made by `clients/vectors/scripts_form.py`) is read by the same handler, every
//! call of its cases (refunds and held calls' answers included) going through the crate's
//! own client and its scripts path, as in production. Every `*.json` file must have a
//! handler and every case a known kind; a failure names the case id.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use redis_tb_client::redis::{ErrorKind, RedisError, Value as RValue};
use redis_tb_client::{
    Acquired, Backend, BackendSetting, Call, CallKind, Charge, Check, Chosen, ClientConfig,
    ClientIpConfig, Decision, Error, FailureMode, ForwardedHeader, Hold, HoldReply, Identity, Key,
    LegacyReset, Limit, LimitKind, ManualClock, MultiReply, Outcome, Policy, PolicyResult,
    RateLimiter, Renewal, Reply, ScriptsVia, Sent, SettleReply, SettleTarget, Store, TbClient,
    Transport, WindowMode, headers, ip, keys, policy, problem,
};
use serde_json::Value;
use tokio::sync::oneshot;

type Failures = Vec<String>;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vectors")
}

/// A number field: a JSON number or `"NaN"`, `"Infinity"`, `"-Infinity"`.
fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) if s == "NaN" => f64::NAN,
        Value::String(s) if s == "Infinity" => f64::INFINITY,
        Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
        other => panic!("not a number field: {other}"),
    }
}

/// A header string: one byte per character (Latin-1).
fn latin1(s: &str) -> Vec<u8> {
    s.chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap())
        .collect()
}

fn header_lines(v: &Value) -> Vec<(String, Vec<Vec<u8>>)> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, lines)| {
                    let lines = lines
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|l| latin1(l.as_str().unwrap()))
                        .collect();
                    (k.clone(), lines)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The headers as an `http::HeaderMap`; `Err` with the line `http` refuses (a control
/// byte: no request in this stack can carry one, hyper answers 400 before any layer).
fn header_map(v: &Value) -> Result<HeaderMap, Vec<u8>> {
    let mut map = HeaderMap::new();
    for (name, lines) in header_lines(v) {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        for line in lines {
            let value = HeaderValue::from_bytes(&line).map_err(|_| line.clone())?;
            map.append(name.clone(), value);
        }
    }
    Ok(map)
}

fn parts(headers: HeaderMap) -> Parts {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri("/")
        .body(())
        .unwrap();
    *req.headers_mut() = headers;
    req.into_parts().0
}

fn id(case: &Value) -> String {
    case["id"].as_str().unwrap_or("?").to_owned()
}

macro_rules! check {
    ($fails:expr, $case:expr, $what:expr, $got:expr, $want:expr) => {{
        let (got, want) = ($got, $want);
        if got != want {
            $fails.push(format!(
                "{} ({}): {}: got {:?}, want {:?}",
                id($case),
                $case["title"].as_str().unwrap_or(""),
                $what,
                got,
                want
            ));
        }
    }};
}

fn opt_num(v: &Value) -> Option<f64> {
    if v.is_null() { None } else { Some(num(v)) }
}

// ---------------------------------------------------------------- numbers.json

fn numbers(case: &Value, fails: &mut Failures) {
    let args: Vec<f64> = case["args"].as_array().unwrap().iter().map(num).collect();
    let want = &case["expect"];
    let got: Value = match case["fn"].as_str().unwrap() {
        "quota" => headers::quota(args[0]).into(),
        "window" => headers::window(args[0], args[1]).into(),
        "remaining" => headers::remaining(args[0]).into(),
        "reset" => headers::reset(args[0]).into(),
        "retry_after" => headers::retry_after(args[0]).map_or(Value::Null, Value::from),
        "body_number" => problem::body_number(args[0]).into(),
        other => {
            fails.push(format!("{}: unknown fn {other}", id(case)));
            return;
        }
    };
    check!(fails, case, "value", &got, want);
}

// ---------------------------------------------------------------- config.json

fn build_with(p: Vec<Policy>, f: impl FnOnce(TestBuilder) -> TestBuilder) -> bool {
    let b = RateLimiter::builder(FakeStore::new(Duration::from_millis(50)));
    let b = p.into_iter().fold(b, |b, p| b.policy(p));
    f(b).build().is_ok()
}

type TestBuilder = redis_tb_client::RateLimiterBuilder<FakeStore, RateLimiter<FakeStore>>;

fn config(case: &Value, fails: &mut Failures) {
    let value = &case["value"];
    let one = || vec![Policy::new("ip", Limit::per_second(1.0))];
    let mut normalized = None;
    let valid = match case["setting"].as_str().unwrap() {
        "prefix" => {
            let prefix = value.as_str().unwrap().to_owned();
            build_with(one(), |b| b.key_prefix(&prefix))
        }
        "policy_name" => build_with(
            vec![Policy::new(value.as_str().unwrap(), Limit::per_second(1.0))],
            |b| b,
        ),
        "policy_names" => build_with(
            value
                .as_array()
                .unwrap()
                .iter()
                .map(|n| Policy::new(n.as_str().unwrap(), Limit::per_second(1.0)))
                .collect(),
            |b| b,
        ),
        "limit" => build_with(
            vec![Policy::new(
                "ip",
                Limit::new(num(&value["capacity"]), num(&value["rate"])),
            )],
            |b| b,
        ),
        "cost" => build_with(
            vec![Policy::new("ip", Limit::per_second(1.0)).cost(num(value))],
            |b| b,
        ),
        "trusted_proxy" => {
            let s = value.as_str().unwrap().to_owned();
            normalized = ip::parse_trusted_proxy(&s).ok().map(|n| n.to_string());
            build_with(one(), |b| b.trusted_proxies([s]))
        }
        "ipv4_prefix" | "ipv6_prefix" => match value.as_i64().and_then(|v| u8::try_from(v).ok()) {
            // A negative or huge prefix does not fit the setting's type (u8).
            None => false,
            Some(p) if case["setting"] == "ipv4_prefix" => build_with(one(), |b| b.ipv4_prefix(p)),
            Some(p) => build_with(one(), |b| b.ipv6_prefix(p)),
        },
        "header" => match value.as_str().unwrap().parse::<ForwardedHeader>() {
            Ok(h) => build_with(one(), |b| b.forwarded_header(h)),
            Err(_) => false,
        },
        "window" => {
            let mode = match value["mode"].as_str() {
                None | Some("sliding") => WindowMode::Sliding,
                Some("fixed") => WindowMode::Fixed,
                Some("log") => WindowMode::Log,
                Some(other) => panic!("unknown window mode {other}"),
            };
            let limit = Limit::window(num(&value["limit"]), num(&value["seconds"]), mode);
            build_with(vec![Policy::new("win", limit)], |b| b)
        }
        "in_flight" => {
            let mut limit = Limit::in_flight(num(&value["limit"]), num(&value["lease"]));
            if let Some(d) = value.get("max_duration") {
                limit = limit.max_duration(num(d));
            }
            if let Some(want) = case["expect"].get("normalized") {
                let got = (limit.capacity, limit.lease_ms(), limit.max_duration_ms());
                // SPEC N7: 300 s when the case gives none.
                let want_max = want["max_duration_ms"].as_u64().or(Some(300_000));
                check!(
                    fails,
                    case,
                    "normalized",
                    got,
                    (num(&want["limit"]), want["lease_ms"].as_u64(), want_max)
                );
            }
            let mut p = Policy::new("conc", limit);
            if let Some(c) = value.get("cost") {
                p = p.cost(num(c));
            }
            build_with(vec![p], |b| b)
        }
        "policy_kinds" => build_with(
            value
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let name = format!("p{i}");
                    match k.as_str().unwrap() {
                        "bucket" => Policy::new(&name, Limit::per_second(1.0)),
                        "window" => {
                            Policy::new(&name, Limit::window_per_minute(5.0, WindowMode::Sliding))
                        }
                        "in_flight" => Policy::new(&name, Limit::in_flight(2.0, 30.0)),
                        "settle_later" => {
                            Policy::new(&name, Limit::per_second(1.0)).settle_later(true)
                        }
                        other => panic!("unknown policy kind {other}"),
                    }
                })
                .collect(),
            |b| b,
        ),
        // SPEC C7: the store's timeout and the limiter's settings. A value the setting's
        // type cannot hold (a fraction or NaN of milliseconds, a negative duration, 1.5
        // entries) never reaches the builder: invalid, as the type refuses it.
        "timeout_ms" => match whole(value) {
            Some(ms) => {
                let store = FakeStore::new(Duration::from_millis(ms));
                let b = RateLimiter::builder(store).policy(one().remove(0));
                b.build().is_ok()
            }
            None => false,
        },
        "cooldown_ms" => match whole(value) {
            Some(ms) => build_with(one(), |b| b.cooldown(Duration::from_millis(ms))),
            None => false,
        },
        "deny_cache_max_entries" => match whole(value).and_then(|n| usize::try_from(n).ok()) {
            Some(n) => build_with(one(), |b| b.deny_cache(n)),
            None => false,
        },
        // SPEC W1: `Limit::window_per_<unit>(n, mode)`, the mode's default when the case
        // gives none.
        "window_helper" => {
            let n = num(&value["n"]);
            let mode = match value["mode"].as_str() {
                None => WindowMode::default(),
                Some("sliding") => WindowMode::Sliding,
                Some("fixed") => WindowMode::Fixed,
                Some(other) => panic!("unknown window mode {other}"),
            };
            let limit = match value["unit"].as_str().unwrap() {
                "second" => Limit::window_per_second(n, mode),
                "minute" => Limit::window_per_minute(n, mode),
                "hour" => Limit::window_per_hour(n, mode),
                "day" => Limit::window_per_day(n, mode),
                other => panic!("unknown unit {other}"),
            };
            if let Some(want) = case["expect"].get("normalized") {
                let got = match limit.kind {
                    LimitKind::Window { seconds, mode } => {
                        Some((limit.capacity, seconds, format!("{mode:?}").to_lowercase()))
                    }
                    _ => None,
                };
                check!(
                    fails,
                    case,
                    "normalized",
                    got,
                    Some((
                        num(&want["limit"]),
                        num(&want["seconds"]),
                        want["mode"].as_str().unwrap().to_owned()
                    ))
                );
            }
            build_with(vec![Policy::new("win", limit)], |b| b)
        }
        "fixed_key" => build_with(
            vec![
                Policy::new("all", Limit::per_second(1.0)).key(Key::fixed(value.as_str().unwrap())),
            ],
            |b| b,
        ),
        other => {
            fails.push(format!("{}: unknown setting {other}", id(case)));
            return;
        }
    };
    check!(
        fails,
        case,
        "valid",
        valid,
        case["expect"]["valid"].as_bool().unwrap()
    );
    if let Some(want) = case["expect"]["normalized"].as_str()
        && case["setting"] != "in_flight"
    {
        check!(fails, case, "normalized", normalized.as_deref(), Some(want));
    }
}

/// A whole number of milliseconds or entries, `None` for what the setting's type cannot
/// hold (NaN, a fraction, a negative number).
fn whole(v: &Value) -> Option<u64> {
    let x = num(v);
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= 9_007_199_254_740_992.0)
        .then_some(x as u64)
}

// ---------------------------------------------------------------- address.json

fn address(case: &Value, fails: &mut Failures) {
    let c = &case["config"];
    let mut cfg = ClientIpConfig::new();
    if let Some(t) = c["trusted_proxies"].as_array() {
        cfg = cfg
            .trusted_proxies(t.iter().map(|s| s.as_str().unwrap()))
            .unwrap();
    }
    if let Some(h) = c["header"].as_str() {
        cfg = cfg.header(h.parse().unwrap());
    }
    if let Some(p) = c["ipv4_prefix"].as_u64() {
        cfg = cfg.ipv4_prefix(u8::try_from(p).unwrap()).unwrap();
    }
    if let Some(p) = c["ipv6_prefix"].as_u64() {
        cfg = cfg.ipv6_prefix(u8::try_from(p).unwrap()).unwrap();
    }
    let headers = header_map(&case["headers"]).unwrap();
    let peer: Option<IpAddr> = case["peer"].as_str().and_then(ip::parse_peer);
    let resolved = peer.map(|p| cfg.resolve(p, &headers));
    let want = &case["expect"];
    check!(
        fails,
        case,
        "client",
        resolved.as_ref().map(|r| r.addr.to_string()),
        want["client"].as_str().map(str::to_owned)
    );
    check!(
        fails,
        case,
        "identity",
        resolved.as_ref().map(|r| r.identity.clone()),
        want["identity"].as_str().map(str::to_owned)
    );
}

// ---------------------------------------------------------------- keys.json

async fn keys_case(case: &Value, fails: &mut Failures) {
    let identity = case["identity"].as_str().map(str::to_owned);
    // The key function's answer, through the same path as a limiter's (SPEC I1).
    let key = Key::from_fn(move |_| identity.clone());
    let p = parts(HeaderMap::new());
    let got = match key.identity(&p).await {
        Identity::Skip => None,
        Identity::Value(v) => Some(keys::key(
            case["prefix"].as_str().unwrap(),
            case["tag"].as_str().map(str::as_bytes),
            case["policy"].as_str().unwrap(),
            case["route"].as_str(),
            &v,
        )),
        Identity::BadRequest => Some("<bad request>".to_owned()),
    };
    let want = &case["expect"];
    if want["skip"].as_bool() == Some(true) {
        check!(fails, case, "key", got, None::<String>);
    } else {
        check!(fails, case, "key", got.as_deref(), want["key"].as_str());
    }
}

// ---------------------------------------------------------------- header_identity.json

async fn header_identity(case: &Value, fails: &mut Failures) {
    let name = case["header"].as_str().unwrap();
    let lines: Vec<Vec<u8>> = case["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| latin1(l.as_str().unwrap()))
        .collect();
    let pure = policy::header_identity(lines.iter().map(Vec::as_slice));
    // Through a request when `http` can carry the lines (it refuses control bytes).
    let mut map = HeaderMap::new();
    let mut representable = true;
    for l in &lines {
        match HeaderValue::from_bytes(l) {
            Ok(v) => {
                map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), v);
            }
            Err(_) => representable = false,
        }
    }
    let p = parts(map);
    let key = Key::header(HeaderName::from_bytes(name.as_bytes()).unwrap());
    let via_request = key.identity(&p).await;
    if representable {
        check!(fails, case, "request path = pure path", &via_request, &pure);
    }
    let got = match &pure {
        Identity::Skip => "skip".to_owned(),
        Identity::BadRequest => "bad_request".to_owned(),
        Identity::Value(v) => keys::key("rl", None, "key", None, v),
    };
    let want = &case["expect"];
    let want = if want["skip"].as_bool() == Some(true) {
        "skip".to_owned()
    } else if want["bad_request"].as_bool() == Some(true) {
        "bad_request".to_owned()
    } else {
        want["key"].as_str().unwrap().to_owned()
    };
    check!(fails, case, "identity", got, want);
}

// ---------------------------------------------------------------- response.json

fn result_of(r: &Value) -> PolicyResult {
    let capacity = num(&r["capacity"]);
    let kind = match r["kind"].as_str() {
        None | Some("bucket") => LimitKind::Bucket,
        Some("window") => LimitKind::Window {
            seconds: capacity / num(&r["rate"]),
            mode: WindowMode::Sliding,
        },
        Some("in_flight") => Limit::in_flight(1.0, 30.0).kind,
        Some(other) => panic!("unknown result kind {other}"),
    };
    PolicyResult {
        name: Arc::from(r["name"].as_str().unwrap()),
        key: format!("rl:{}:x", r["name"].as_str().unwrap()),
        capacity,
        // SPEC N3: an in-flight result has no rate (null in the vectors, 0 here).
        rate: opt_num(&r["rate"]).unwrap_or(0.0),
        cost: num(&r["cost"]),
        allowed: r["allowed"].as_bool().unwrap(),
        remaining: num(&r["remaining"]),
        retry_after: num(&r["retry_after"]),
        reset_after: num(&r["reset_after"]),
        shadow: r["shadow"].as_bool().unwrap_or(false),
        kind,
    }
}

fn names(v: &[Arc<str>]) -> Vec<String> {
    v.iter().map(|n| n.to_string()).collect()
}

fn want_names(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|n| n.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default()
}

fn compare_headers(case: &Value, fails: &mut Failures, got: &HeaderMap, want: &Value) {
    if let Some(want) = want.as_object() {
        for (name, value) in want {
            let got = got.get(name.as_str()).map(|v| v.as_bytes().to_vec());
            let want = value.as_str().map(latin1);
            check!(fails, case, format!("header {name}"), got, want);
        }
    }
}

fn response(case: &Value, fails: &mut Failures) {
    let results: Vec<PolicyResult> = case["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(result_of)
        .collect();
    let d = Decision::from_results(results);
    let want = &case["expect"];
    let wd = &want["decision"];
    check!(
        fails,
        case,
        "outcome",
        d.outcome.as_str(),
        wd["outcome"].as_str().unwrap()
    );
    check!(
        fails,
        case,
        "allowed",
        d.allowed,
        wd["allowed"].as_bool().unwrap()
    );
    check!(
        fails,
        case,
        "remaining",
        d.remaining,
        opt_num(&wd["remaining"])
    );
    check!(
        fails,
        case,
        "retry_after",
        d.retry_after,
        opt_num(&wd["retry_after"])
    );
    check!(
        fails,
        case,
        "reset_after",
        d.reset_after,
        opt_num(&wd["reset_after"])
    );
    check!(
        fails,
        case,
        "violated",
        names(&d.violated),
        want_names(&wd["violated"])
    );
    check!(
        fails,
        case,
        "shadow_limited",
        names(&d.shadow_limited),
        want_names(&wd["shadow_limited"])
    );
    let legacy = match case["legacy"].as_str() {
        Some("unix") => Some(LegacyReset::UnixTime),
        Some("delta") => Some(LegacyReset::DeltaSeconds),
        _ => None,
    };
    let mut map = HeaderMap::new();
    if let Some(h) = headers::rate_limit_headers_at(&d, legacy, num(&case["now_unix"])) {
        h.apply(&mut map);
    }
    let (status, body) = if d.outcome == Outcome::Limited {
        (429, Some(problem::too_many_requests(&d)))
    } else {
        (200, None)
    };
    check!(
        fails,
        case,
        "status",
        status,
        want["status"].as_u64().unwrap()
    );
    compare_headers(case, fails, &map, &want["headers"]);
    check!(fails, case, "body", body.as_deref(), want["body"].as_str());
}

// ---------------------------------------------------------------- limiter.json

/// The scripted store: each call must be the next one the step lists.
#[derive(Clone)]
struct FakeStore {
    state: Arc<Mutex<FakeState>>,
    timeout: Duration,
    addr: String,
    /// SPEC E: the crate's own client over this store's scripted calls (a [`Transport`]):
    /// every Store call goes through it, its backend's calls included (the scripts'
    /// translation, E3's reload, E4's ids, E5's clock). `None`: the typed fake.
    client: Option<TbClient>,
}

#[derive(Default)]
struct FakeState {
    expected: VecDeque<Value>,
    errors: Vec<String>,
    holds: HashMap<String, oneshot::Sender<Value>>,
    degraded: bool,
    /// `{id:x}` name -> the id the client sent (clients/vectors/README.md, SPEC E4).
    ids: HashMap<String, String>,
}

impl FakeStore {
    fn new(timeout: Duration) -> FakeStore {
        FakeStore {
            state: Arc::default(),
            timeout,
            addr: "fake:0".to_owned(),
            client: None,
        }
    }

    /// The same scripted calls through a [`TbClient`] at `addr` with `config` (SPEC E).
    fn with_client(mut self, addr: &str, config: ClientConfig) -> FakeStore {
        self.addr = addr.to_owned();
        let raw = Arc::new(RawFake(self.clone()));
        self.client = Some(TbClient::over(raw, addr, config).unwrap());
        self
    }

    fn tb(&self) -> Option<&TbClient> {
        self.client.as_ref()
    }

    /// `v` with its placeholders as bound (`{sha}`, `{script}`, `{functions}`, `{id:x}`).
    fn fill(&self, v: &Value) -> Value {
        match v {
            Value::Array(a) => Value::Array(a.iter().map(|x| self.fill(x)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), self.fill(x))).collect())
            }
            Value::String(t) => {
                if let Some(p) = placeholder(t) {
                    return Value::String(p.to_owned());
                }
                match id_name(t) {
                    Some(name) => match self.state.lock().unwrap().ids.get(name) {
                        Some(id) => Value::String(id.clone()),
                        None => Value::String(format!("{t} (never bound)")),
                    },
                    None => v.clone(),
                }
            }
            _ => v.clone(),
        }
    }

    fn expect(&self, calls: &Value) {
        let mut s = self.state.lock().unwrap();
        s.expected = calls.as_array().cloned().unwrap_or_default().into();
    }

    /// Calls listed for the step and not made.
    fn leftover(&self) -> Vec<Value> {
        self.state.lock().unwrap().expected.drain(..).collect()
    }

    fn errors(&self) -> Vec<String> {
        std::mem::take(&mut self.state.lock().unwrap().errors)
    }

    fn holding(&self, name: &str) -> bool {
        self.state.lock().unwrap().holds.contains_key(name)
    }

    fn release(&self, name: &str, answer: Value) {
        if let Some(tx) = self.state.lock().unwrap().holds.remove(name) {
            let _ = tx.send(answer);
        }
    }

    /// Matches a call against the next listed one; its scripted answer.
    async fn answer(&self, args: Vec<Vec<u8>>) -> Result<Value, Error> {
        let next = {
            let mut s = self.state.lock().unwrap();
            let next = s.expected.pop_front();
            match &next {
                None => s.errors.push(format!("unexpected call {}", show(&args))),
                Some(want) => {
                    if !same_call(&args, &want["call"], &mut s.ids) {
                        s.errors.push(format!(
                            "call {} but the vector lists {}",
                            show(&args),
                            want["call"]
                        ));
                    }
                }
            }
            next
        };
        let Some(want) = next else {
            return Err(conn_error());
        };
        let answer = if let Some(name) = want["hold"].as_str() {
            let (tx, rx) = oneshot::channel();
            self.state.lock().unwrap().holds.insert(name.to_owned(), tx);
            match rx.await {
                Ok(v) => v,
                Err(_) => return Err(conn_error()),
            }
        } else {
            want
        };
        if let Some(e) = answer["error"].as_str() {
            return Err(server_error(e));
        }
        if answer["timeout"].as_bool() == Some(true) {
            return Err(Error::Timeout {
                addr: "fake:0".into(),
                timeout: self.timeout,
            });
        }
        if answer["connection_error"].as_bool() == Some(true) {
            return Err(conn_error());
        }
        Ok(self.fill(&answer["reply"]))
    }
}

/// The scripted calls as a raw [`Transport`]: a reply as the wire gives it (a JSON
/// integer as an integer, another number as a double, a string as a bulk string, `null`
/// as nil, an object as a map).
struct RawFake(FakeStore);

fn wire(v: &Value) -> RValue {
    match v {
        Value::Null => RValue::Nil,
        Value::Bool(b) => RValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => RValue::Int(i),
            None => RValue::Double(n.as_f64().unwrap()),
        },
        Value::String(s) => RValue::BulkString(s.as_bytes().to_vec()),
        Value::Array(a) => RValue::Array(a.iter().map(wire).collect()),
        Value::Object(o) => RValue::Map(
            o.iter()
                .map(|(k, x)| (RValue::BulkString(k.as_bytes().to_vec()), wire(x)))
                .collect(),
        ),
    }
}

impl Transport for RawFake {
    fn send(&self, args: Vec<Vec<u8>>) -> Sent {
        let store = self.0.clone();
        Box::pin(async move { store.answer(args).await.map(|v| wire(&v)) })
    }
}

/// An error reply as the `redis` crate reads it off the wire (its code parsed: `CROSSSLOT`,
/// `NOPERM`, ...).
fn server_error(text: &str) -> Error {
    let source = redis_tb_client::redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
        .and_then(|v| v.extract_error())
        .err()
        .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "not an error reply")));
    Error::Server {
        addr: "fake:0".into(),
        source,
    }
}

fn conn_error() -> Error {
    Error::Connection {
        addr: "fake:0".into(),
        source: RedisError::from((ErrorKind::Io, "connection refused")),
    }
}

fn show(args: &[Vec<u8>]) -> String {
    let parts: Vec<String> = args
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    format!("{parts:?}")
}

/// SPEC E's placeholders for the library's texts and SHA-1, as the crate ships them.
fn placeholder(t: &str) -> Option<&'static str> {
    match t {
        "{sha}" => Some(redis_tb_client::lua::sha()),
        "{script}" => Some(redis_tb_client::lua::script()),
        "{functions}" => Some(redis_tb_client::lua::functions()),
        _ => None,
    }
}

/// `x` of `{id:x}`.
fn id_name(t: &str) -> Option<&str> {
    t.strip_prefix("{id:")?.strip_suffix('}')
}

/// Whether `got` is the id `{id:name}` stands for: bound on its first appearance (16
/// lowercase hex digits, never an id another name bound: E4's every id fresh).
fn id_matches(ids: &mut HashMap<String, String>, name: &str, got: &[u8]) -> bool {
    let Ok(got) = std::str::from_utf8(got) else {
        return false;
    };
    if got.len() != 16 || !got.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return false;
    }
    if let Some(bound) = ids.get(name) {
        return bound == got;
    }
    if ids.values().any(|v| v == got) {
        return false;
    }
    ids.insert(name.to_owned(), got.to_owned());
    true
}

/// Names and keys exactly, numbers numerically; placeholders as bound.
fn same_call(args: &[Vec<u8>], want: &Value, ids: &mut HashMap<String, String>) -> bool {
    let Some(want) = want.as_array() else {
        return false;
    };
    args.len() == want.len()
        && args.iter().zip(want).all(|(a, w)| match w {
            Value::String(s) if placeholder(s).is_some() => {
                placeholder(s).is_some_and(|p| a.as_slice() == p.as_bytes())
            }
            Value::String(s) if id_name(s).is_some() => {
                id_name(s).is_some_and(|n| id_matches(ids, n, a))
            }
            Value::String(s) => a.as_slice() == s.as_bytes(),
            Value::Number(_) => std::str::from_utf8(a)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
                .is_some_and(|x| x == num(w)),
            _ => false,
        })
}

fn reply4(v: &Value) -> Option<Reply> {
    let a = v.as_array()?;
    Some(Reply {
        allowed: num(a.first()?) != 0.0,
        remaining: num(a.get(1)?),
        retry_after: num(a.get(2)?),
        reset_after: num(a.get(3)?),
    })
}

fn bad_reply() -> Error {
    Error::UnexpectedReply {
        addr: "fake:0".into(),
        command: "TB.MTAKE",
        detail: "the vector's reply does not parse".into(),
    }
}

impl Store for FakeStore {
    async fn take(&self, call: &Call) -> Result<MultiReply, Error> {
        if let Some(tb) = self.tb() {
            return Store::take(tb, call).await;
        }
        let v = self.answer(call.args()).await?;
        let head = reply4(&v).ok_or_else(bad_reply)?;
        let buckets = if call.charges().len() == 1 || call.kind() == CallKind::Window {
            vec![head]
        } else {
            v.get(4)
                .and_then(Value::as_array)
                .ok_or_else(bad_reply)?
                .iter()
                .map(|b| reply4(b).ok_or_else(bad_reply))
                .collect::<Result<_, _>>()?
        };
        Ok(MultiReply {
            allowed: head.allowed,
            remaining: head.remaining,
            retry_after: head.retry_after,
            reset_after: head.reset_after,
            buckets,
        })
    }

    async fn refund(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        if let Some(tb) = self.tb() {
            return Store::refund(tb, charges).await;
        }
        let mut out = Vec::new();
        for c in charges {
            let args = vec![
                b"TB.REFUND".to_vec(),
                c.key.as_bytes().to_vec(),
                c.capacity.to_string().into_bytes(),
                c.rate.to_string().into_bytes(),
                c.n.to_string().into_bytes(),
            ];
            out.push(reply4(&self.answer(args).await?).ok_or_else(bad_reply)?);
        }
        Ok(out)
    }

    async fn acquire(&self, call: &Call) -> Result<Acquired, Error> {
        if let Some(tb) = self.tb() {
            return Store::acquire(tb, call).await;
        }
        let v = self.answer(call.args()).await?;
        let a = v.as_array().ok_or_else(bad_reply)?;
        let buckets = match a.get(5) {
            None => Vec::new(),
            Some(per) => per
                .as_array()
                .ok_or_else(bad_reply)?
                .iter()
                .map(|b| reply4(b).ok_or_else(bad_reply))
                .collect::<Result<_, _>>()?,
        };
        Ok(Acquired {
            granted: num(a.first().ok_or_else(bad_reply)?) != 0.0,
            in_flight: num(a.get(1).ok_or_else(bad_reply)?),
            id: a.get(2).and_then(Value::as_str).map(str::to_owned),
            ms: num(a.get(3).ok_or_else(bad_reply)?),
            buckets,
        })
    }

    async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        if let Some(tb) = self.tb() {
            return Store::release(tb, key, id).await;
        }
        let v = self
            .answer(vec![
                b"TB.RELEASE".to_vec(),
                key.as_bytes().to_vec(),
                id.as_bytes().to_vec(),
            ])
            .await?;
        let a = v.as_array().ok_or_else(bad_reply)?;
        Ok((
            num(a.first().ok_or_else(bad_reply)?) != 0.0,
            num(a.get(1).ok_or_else(bad_reply)?),
        ))
    }

    async fn renew(&self, key: &str, id: &str, lease_ms: u64) -> Result<(bool, f64, f64), Error> {
        if let Some(tb) = self.tb() {
            return Store::renew(tb, key, id, lease_ms).await;
        }
        let v = self
            .answer(vec![
                b"TB.RENEW".to_vec(),
                key.as_bytes().to_vec(),
                id.as_bytes().to_vec(),
                lease_ms.to_string().into_bytes(),
            ])
            .await?;
        let a = v.as_array().ok_or_else(bad_reply)?;
        Ok((
            num(a.first().ok_or_else(bad_reply)?) != 0.0,
            num(a.get(1).ok_or_else(bad_reply)?),
            num(a.get(2).ok_or_else(bad_reply)?),
        ))
    }

    async fn hold(&self, t: &SettleTarget, estimate: f64, ttl_ms: u64) -> Result<HoldReply, Error> {
        if let Some(tb) = self.tb() {
            return Store::hold(tb, t, estimate, ttl_ms).await;
        }
        let v = self
            .answer(vec![
                b"TB.HOLD".to_vec(),
                t.key.as_bytes().to_vec(),
                t.capacity.to_string().into_bytes(),
                t.rate.to_string().into_bytes(),
                estimate.to_string().into_bytes(),
                ttl_ms.to_string().into_bytes(),
            ])
            .await?;
        Ok(HoldReply {
            reply: reply4(&v).ok_or_else(bad_reply)?,
            id: v.get(4).and_then(Value::as_str).map(str::to_owned),
        })
    }

    async fn settle(
        &self,
        t: &SettleTarget,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> Result<SettleReply, Error> {
        if let Some(tb) = self.tb() {
            return Store::settle(tb, t, id, actual, max_wait).await;
        }
        let v = self
            .answer(vec![
                b"TB.SETTLE".to_vec(),
                t.key.as_bytes().to_vec(),
                t.capacity.to_string().into_bytes(),
                t.rate.to_string().into_bytes(),
                id.as_bytes().to_vec(),
                actual.to_string().into_bytes(),
                max_wait.to_string().into_bytes(),
            ])
            .await?;
        let r = reply4(&v).ok_or_else(bad_reply)?;
        Ok(SettleReply {
            settled: r.allowed,
            remaining: r.remaining,
            charged: r.retry_after,
            reset_after: r.reset_after,
        })
    }

    async fn command_info(&self) -> Result<bool, Error> {
        if let Some(tb) = self.tb() {
            return Store::command_info(tb).await;
        }
        let v = self
            .answer(vec![
                b"COMMAND".to_vec(),
                b"INFO".to_vec(),
                b"tb.take".to_vec(),
            ])
            .await?;
        // `[null]` without the module, `[[name, arity, ...]]` with it.
        Ok(v.get(0)
            .is_some_and(|e| e.as_array().is_some_and(|a| !a.is_empty())))
    }

    async fn hello(&self) -> Result<Option<String>, Error> {
        if let Some(tb) = self.tb() {
            return Store::hello(tb).await;
        }
        let v = self.answer(vec![b"HELLO".to_vec()]).await?;
        Ok(v["mode"].as_str().map(str::to_owned))
    }

    async fn choose_backend(&self) -> Result<Chosen, Error> {
        match self.tb() {
            Some(tb) => Store::choose_backend(tb).await,
            None => Err(bad_reply()),
        }
    }

    fn backend(&self) -> Option<Chosen> {
        self.tb().and_then(Store::backend)
    }

    fn started_degraded(&self) -> bool {
        self.state.lock().unwrap().degraded
    }

    fn addr(&self) -> &str {
        &self.addr
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// What a step's functions return: the cost and limit functions per policy (a limit of
/// `None`: the function returns nothing, L2) and the tier function's answer.
#[derive(Clone, Default)]
struct StepInputs {
    cost: HashMap<String, f64>,
    limit: HashMap<String, Option<Limit>>,
    tier: HashMap<String, String>,
}

/// The fields a scripted case's limiter and policies may have (README): an unknown one
/// fails the case instead of being ignored.
const LIMITER_FIELDS: [&str; 9] = [
    "policies",
    "fail_open",
    "timeout_ms",
    "cooldown_ms",
    "deny_cache",
    "exclude",
    "limit_unmatched",
    "refund_on",
    "backend",
];
const POLICY_FIELDS: [&str; 13] = [
    "name",
    "capacity",
    "rate",
    "cost",
    "shadow",
    "key",
    "window",
    "in_flight",
    "settle_later",
    "routes",
    "per_route",
    "tiers",
    "default_tier",
];

fn unknown_fields(v: &Value, known: &[&str]) -> Vec<String> {
    v.as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .filter(|k| !known.contains(&k.as_str()))
        .cloned()
        .collect()
}

/// A route as the vectors write it (SPEC K5): `<METHOD> <template>`, `*` for every method.
fn route_of(s: &str) -> (Option<Method>, String) {
    let (method, template) = s.split_once(' ').unwrap_or(("*", s));
    let method = (method != "*").then(|| Method::from_bytes(method.as_bytes()).unwrap());
    (method, template.to_owned())
}

fn limiter_of(case: &Value, store: FakeStore, clock: ManualClock) -> RateLimiter<FakeStore> {
    limiter_builder(case, store, clock).build().unwrap()
}

fn limiter_builder(case: &Value, store: FakeStore, clock: ManualClock) -> TestBuilder {
    let l = &case["limiter"];
    let steps = case["steps"].as_array().unwrap();
    let has = |field: &str, name: &str| steps.iter().any(|s| s["check"][field].get(name).is_some());
    let mut b = RateLimiter::builder(store).clock(Arc::new(clock));
    for p in l["policies"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_owned();
        let bucket = || Limit::new(num(&p["capacity"]), num(&p["rate"]));
        let limit = if let Some(w) = p.get("window") {
            let mode = match w["mode"].as_str() {
                Some("fixed") => WindowMode::Fixed,
                _ => WindowMode::Sliding,
            };
            Limit::window(num(&w["limit"]), num(&w["seconds"]), mode)
        } else if let Some(f) = p.get("in_flight") {
            let limit = Limit::in_flight(num(&f["limit"]), num(&f["lease_ms"]) / 1000.0);
            match f.get("max_duration_ms") {
                Some(ms) => limit.max_duration(num(ms) / 1000.0),
                None => limit,
            }
        } else if p.get("tiers").is_some() {
            // Only the tiered policy's default counts; the tiers are set below.
            Limit::new(1.0, 1.0)
        } else {
            bucket()
        };
        let cost = p.get("cost").map_or(1.0, num);
        let mut policy = match p["tiers"].as_object() {
            // SPEC L2: the tier function answers the step's `tier` for this policy; the
            // default is the limit of `default_tier`.
            Some(tiers) => {
                let tiers: Vec<(String, Limit)> = tiers
                    .iter()
                    .map(|(t, l)| (t.clone(), Limit::new(num(&l["capacity"]), num(&l["rate"]))))
                    .collect();
                let default = tiers
                    .iter()
                    .find(|(t, _)| Some(t.as_str()) == p["default_tier"].as_str())
                    .map(|(_, l)| *l)
                    .unwrap();
                let n = name.clone();
                Policy::tiered(&name, tiers, default, move |parts| {
                    parts
                        .extensions
                        .get::<StepInputs>()
                        .and_then(|s| s.tier.get(&n).cloned())
                })
            }
            None => Policy::new(&name, limit),
        }
        .shadow(p["shadow"].as_bool().unwrap_or(false))
        .settle_later(p["settle_later"].as_bool().unwrap_or(false));
        if p.get("cost").is_some() {
            policy = policy.cost(cost);
        }
        policy = match p["key"]["kind"].as_str() {
            None | Some("client_ip") => policy,
            Some("header") => policy.key(Key::header(
                HeaderName::from_bytes(p["key"]["name"].as_str().unwrap().as_bytes()).unwrap(),
            )),
            Some("fixed") => policy.key(Key::fixed(p["key"]["value"].as_str().unwrap())),
            Some(other) => panic!("unknown key kind {other}"),
        };
        // SPEC L1, K5: the routes the policy lists, and its per-route key.
        for r in p["routes"].as_array().into_iter().flatten() {
            policy = match route_of(r.as_str().unwrap()) {
                (Some(m), t) => policy.route(m, &t),
                (None, t) => policy.route_any_method(&t),
            };
        }
        if p["per_route"].as_bool() == Some(true) {
            policy = policy.per_route();
        }
        if has("cost", &name) {
            let n = name.clone();
            policy = policy.cost_fn(move |parts| {
                parts
                    .extensions
                    .get::<StepInputs>()
                    .and_then(|s| s.cost.get(&n).copied())
                    .unwrap_or(cost)
            });
        }
        if has("limit", &name) {
            let (n, fixed) = (name.clone(), bucket());
            policy = policy.limit_fn(move |parts| {
                match parts
                    .extensions
                    .get::<StepInputs>()
                    .map(|s| s.limit.get(&n))
                {
                    // The step names the policy: what its function returns (maybe nothing).
                    Some(Some(l)) => *l,
                    _ => Some(fixed),
                }
            });
        }
        b = b.policy(policy);
    }
    if l["fail_open"].as_bool() == Some(false) {
        b = b.failure_mode(FailureMode::FailClosed);
    }
    if let Some(ms) = l["cooldown_ms"].as_u64() {
        b = b.cooldown(Duration::from_millis(ms));
    }
    if let Some(n) = l["deny_cache"]["max_entries"].as_u64() {
        b = b.deny_cache(usize::try_from(n).unwrap());
    }
    // SPEC L1: the limiter's scope.
    for r in l["exclude"].as_array().into_iter().flatten() {
        b = match route_of(r.as_str().unwrap()) {
            (Some(m), t) => b.exclude(m, &t),
            (None, t) => b.exclude_any_method(&t),
        };
    }
    if l["limit_unmatched"].as_bool() == Some(true) {
        b = b.limit_unmatched(true);
    }
    // SPEC F2: the statuses that refund.
    if let Some(statuses) = l["refund_on"].as_array() {
        let statuses: Vec<u64> = statuses.iter().map(|s| s.as_u64().unwrap()).collect();
        b = b.refund_on(move |s| statuses.contains(&u64::from(s.as_u16())));
    }
    b
}

/// The route of a check without `route`: one no policy lists and no `exclude` names.
const DEFAULT_ROUTE: &str = "GET /vectors";

/// A step's request head and its matched route template (`None`: it matched no route).
fn step_parts(check: &Value) -> Result<(Parts, Option<String>), Vec<u8>> {
    let mut p = parts(header_map(&check["headers"])?);
    let route = match check.get("route") {
        None => Some(route_of(DEFAULT_ROUTE)),
        Some(Value::Null) => None,
        Some(r) => Some(route_of(r.as_str().unwrap())),
    };
    let template = route.map(|(method, template)| {
        p.method = method.unwrap_or(Method::GET);
        template
    });
    let mut inputs = StepInputs::default();
    if let Some(c) = check["cost"].as_object() {
        for (k, v) in c {
            inputs.cost.insert(k.clone(), num(v));
        }
    }
    if let Some(c) = check["limit"].as_object() {
        for (k, v) in c {
            let limit = (!v.is_null()).then(|| Limit::new(num(&v["capacity"]), num(&v["rate"])));
            inputs.limit.insert(k.clone(), limit);
        }
    }
    if let Some(t) = check["tier"].as_object() {
        for (k, v) in t {
            inputs
                .tier
                .insert(k.clone(), v.as_str().unwrap().to_owned());
        }
    }
    p.extensions.insert(inputs);
    Ok((p, template))
}

fn compare_check(case: &Value, step: usize, fails: &mut Failures, c: &Check, want: &Value) {
    let mut local = Vec::new();
    let d = &c.decision;
    if let Some(w) = want["outcome"].as_str() {
        check!(local, case, "outcome", d.outcome.as_str(), w);
    }
    if let Some(w) = want["allowed"].as_bool() {
        check!(local, case, "allowed", d.allowed, w);
    }
    if let Some(w) = want["from_cache"].as_bool() {
        check!(local, case, "from_cache", d.from_cache, w);
    }
    if let Some(w) = want["status"].as_u64() {
        check!(local, case, "status", u64::from(c.status().as_u16()), w);
    }
    if want.get("violated").is_some() {
        check!(
            local,
            case,
            "violated",
            names(&d.violated),
            want_names(&want["violated"])
        );
    }
    if want.get("shadow_limited").is_some() {
        check!(
            local,
            case,
            "shadow_limited",
            names(&d.shadow_limited),
            want_names(&want["shadow_limited"])
        );
    }
    if let Some(w) = want.get("lease") {
        let got = d
            .lease()
            .map(|l| serde_json::json!({"key": l.key, "id": l.id, "policy": &*l.policy}));
        check!(
            local,
            case,
            "lease",
            got.as_ref(),
            (!w.is_null()).then_some(w)
        );
        check!(
            local,
            case,
            "lease handle = decision's lease",
            c.lease.lease(),
            d.lease()
        );
    }
    if let Some(w) = want["results"].as_array() {
        compare_results(case, &mut local, &d.results, w);
    }
    let mut map = HeaderMap::new();
    c.write_headers(&mut map);
    compare_headers(case, &mut local, &map, &want["headers"]);
    if want.get("body").is_some() {
        check!(
            local,
            case,
            "body",
            c.problem.as_ref().map(|(_, b)| b.as_str()),
            want["body"].as_str()
        );
    }
    fails.extend(local.into_iter().map(|f| format!("{f} [step {step}]")));
}

/// SPEC D2: one result per applied policy, in order, each listed field compared (numbers
/// numerically; an in-flight result's `rate` is `null`, 0 here).
fn compare_results(case: &Value, fails: &mut Failures, got: &[PolicyResult], want: &[Value]) {
    check!(fails, case, "results", got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        for field in unknown_fields(w, &RESULT_FIELDS) {
            fails.push(format!("{}: unknown result field {field}", id(case)));
        }
        if let Some(n) = w["name"].as_str() {
            check!(fails, case, format!("results[{k}].name"), &*g.name, n);
        }
        if let Some(key) = w["key"].as_str() {
            check!(
                fails,
                case,
                format!("results[{k}].key"),
                g.key.as_str(),
                key
            );
        }
        for (field, got) in [
            ("capacity", g.capacity),
            ("cost", g.cost),
            ("remaining", g.remaining),
            ("retry_after", g.retry_after),
            ("reset_after", g.reset_after),
        ] {
            if let Some(v) = w.get(field) {
                check!(fails, case, format!("results[{k}].{field}"), got, num(v));
            }
        }
        if let Some(v) = w.get("rate") {
            check!(
                fails,
                case,
                format!("results[{k}].rate"),
                g.rate,
                opt_num(v).unwrap_or(0.0)
            );
        }
        for (field, got) in [("allowed", g.allowed), ("shadow", g.shadow)] {
            if let Some(v) = w[field].as_bool() {
                check!(fails, case, format!("results[{k}].{field}"), got, v);
            }
        }
    }
}

const RESULT_FIELDS: [&str; 10] = [
    "name",
    "key",
    "capacity",
    "rate",
    "cost",
    "allowed",
    "remaining",
    "retry_after",
    "reset_after",
    "shadow",
];

/// The fields of a check (README).
const CHECK: [&str; 6] = ["peer", "headers", "cost", "limit", "tier", "route"];

fn compare_hold(case: &Value, step: usize, fails: &mut Failures, h: &Hold, want: &Value) {
    let mut local = Vec::new();
    if let Some(w) = want["allowed"].as_bool() {
        check!(local, case, "allowed", h.allowed, w);
    }
    if let Some(w) = want.get("id") {
        check!(local, case, "id", h.id.as_deref(), w.as_str());
    }
    for (field, got) in [("remaining", h.remaining), ("retry_after", h.retry_after)] {
        if let Some(w) = want.get(field) {
            check!(local, case, field, got, num(w));
        }
    }
    if let Some(w) = want["key"].as_str() {
        check!(local, case, "key", h.key.as_str(), w);
    }
    if let Some(w) = want["policy"].as_str() {
        check!(local, case, "policy", &*h.policy, w);
    }
    let refusal = h.refusal();
    if let Some(w) = want["status"].as_u64() {
        check!(
            local,
            case,
            "status",
            refusal
                .as_ref()
                .map_or(200, |(s, _, _)| u64::from(s.as_u16())),
            w
        );
    }
    if want.get("headers").is_some() {
        let map = refusal.map(|(_, m, _)| m).unwrap_or_default();
        compare_headers(case, &mut local, &map, &want["headers"]);
    }
    let known = [
        "allowed",
        "id",
        "remaining",
        "retry_after",
        "key",
        "policy",
        "status",
        "headers",
    ];
    if let Some(o) = want.as_object() {
        for k in o.keys().filter(|k| !known.contains(&k.as_str())) {
            local.push(format!("{}: unknown hold field {k}", id(case)));
        }
    }
    fails.extend(local.into_iter().map(|f| format!("{f} [step {step}]")));
}

fn peer_of(check: &Value) -> Option<IpAddr> {
    check["peer"].as_str().and_then(ip::parse_peer)
}

async fn limiter_case(case: &Value, fails: &mut Failures) {
    let l = &case["limiter"];
    for k in unknown_fields(l, &LIMITER_FIELDS) {
        fails.push(format!("{}: unknown limiter field {k}", id(case)));
    }
    for p in l["policies"].as_array().into_iter().flatten() {
        for k in unknown_fields(p, &POLICY_FIELDS) {
            fails.push(format!("{}: unknown policy field {k}", id(case)));
        }
    }
    let timeout = Duration::from_millis(case["limiter"]["timeout_ms"].as_u64().unwrap_or(50));
    let mut store = FakeStore::new(timeout);
    let clock = ManualClock::new(1_764_456_268_000);
    // SPEC E: a case on the scripts runs the crate's client over the scripted calls, the
    // backend chosen already (a limiter case runs no startup), its clock the limiter's.
    if let Some(b) = l.get("backend") {
        for k in unknown_fields(b, &["kind", "via", "client_clock"]) {
            fails.push(format!("{}: unknown backend field {k}", id(case)));
        }
        let via = match (b["kind"].as_str(), b["via"].as_str()) {
            (Some("scripts"), Some("functions")) => ScriptsVia::Functions,
            (Some("scripts"), Some("evalsha")) => ScriptsVia::Evalsha,
            _ => {
                fails.push(format!("{}: unknown backend {b}", id(case)));
                return;
            }
        };
        let config = ClientConfig {
            call_timeout: timeout,
            ..ClientConfig::default()
        };
        store = store.with_client("fake:0", config);
        let tb = store.tb().unwrap();
        tb.set_clock(Arc::new(clock.clone()));
        assert!(tb.use_scripts(via, b["client_clock"].as_bool() == Some(true)));
    }
    let limiter = limiter_of(case, store.clone(), clock.clone());
    let mut checks: HashMap<usize, Check> = HashMap::new();
    let mut held: HashMap<String, (usize, Held)> = HashMap::new();
    let mut holds: HashMap<usize, Hold> = HashMap::new();
    for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
        clock.set_ms(step["at_ms"].as_u64().unwrap());
        // An unknown step field (or expectation of a check) fails the runner.
        const STEP: [&str; 16] = [
            "at_ms",
            "check",
            "redis",
            "expect",
            "release",
            "reply",
            "error",
            "cancel",
            "refund",
            "finish",
            "renew",
            "take_hold",
            "settle",
            "timeout",
            "renew_hold",
            "status",
        ];
        for k in step.as_object().into_iter().flat_map(|o| o.keys()) {
            if !STEP.contains(&k.as_str()) {
                fails.push(format!("{} [step {i}]: unknown step field {k}", id(case)));
            }
        }
        if step.get("check").is_some() {
            const EXPECT: [&str; 10] = [
                "outcome",
                "allowed",
                "from_cache",
                "status",
                "headers",
                "body",
                "violated",
                "shadow_limited",
                "lease",
                "results",
            ];
            for k in step["expect"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
            {
                if !EXPECT.contains(&k.as_str()) {
                    fails.push(format!("{} [step {i}]: unknown expectation {k}", id(case)));
                }
            }
        }
        store.expect(&step["redis"]);
        if let Some(check) = step.get("check") {
            for k in unknown_fields(check, &CHECK) {
                fails.push(format!("{} [step {i}]: unknown check field {k}", id(case)));
            }
            let (mut parts, route) = match step_parts(check) {
                Ok(p) => p,
                Err(line) => {
                    // `http` refuses the line (a control byte): hyper answers 400 before
                    // any layer runs. The limiter's own rule for it is checked directly:
                    // the header identity is a bad request, answered with P4's body, and
                    // no call is made.
                    let id = policy::header_identity([line.as_slice()]);
                    check!(
                        fails,
                        case,
                        "control byte identity",
                        id,
                        Identity::BadRequest
                    );
                    let name = case["limiter"]["policies"][0]["key"]["name"]
                        .as_str()
                        .unwrap();
                    check!(
                        fails,
                        case,
                        "400 body",
                        Some(problem::bad_request(name)),
                        step["expect"]["body"].as_str().map(str::to_owned)
                    );
                    check!(
                        fails,
                        case,
                        "outcome",
                        "bad_request",
                        step["expect"]["outcome"].as_str().unwrap()
                    );
                    continue;
                }
            };
            let peer = peer_of(check);
            let hold = step["redis"]
                .as_array()
                .and_then(|calls| calls.iter().find_map(|c| c["hold"].as_str()));
            if let Some(name) = hold {
                let l = limiter.clone();
                let task =
                    tokio::spawn(async move { l.check(&mut parts, peer, route.as_deref()).await });
                for _ in 0..1000 {
                    if store.holding(name) {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                if !store.holding(name) {
                    fails.push(format!(
                        "{} [step {i}]: the held call was never made",
                        id(case)
                    ));
                }
                held.insert(name.to_owned(), (i, Held::Check(task)));
            } else {
                let c = limiter.check(&mut parts, peer, route.as_deref()).await;
                compare_check(case, i, fails, &c, &store.fill(&step["expect"]));
                checks.insert(i, c);
            }
        } else if let Some(name) = step["release"].as_str() {
            let Some((at, task)) = held.remove(name) else {
                fails.push(format!("{} [step {i}]: nothing held as {name}", id(case)));
                continue;
            };
            store.release(name, step.clone());
            match task {
                Held::Check(task) => {
                    let c = task.await.unwrap();
                    compare_check(case, i, fails, &c, &store.fill(&step["expect"]));
                    checks.insert(at, c);
                }
                Held::Hold(task) => match task.await.unwrap() {
                    Ok(h) => {
                        compare_hold(case, i, fails, &h, &store.fill(&step["expect"]));
                        holds.insert(at, h);
                    }
                    Err(e) => fails.push(format!("{} [step {i}]: hold failed: {e}", id(case))),
                },
            }
        } else if let Some(name) = step["cancel"].as_str() {
            match held.remove(name) {
                Some((_, Held::Check(task))) => {
                    task.abort();
                    let _ = task.await;
                }
                Some((_, Held::Hold(task))) => {
                    task.abort();
                    let _ = task.await;
                }
                None => {}
            }
        } else if let Some(at) = step["refund"].as_u64() {
            let Some(c) = checks.get(&usize::try_from(at).unwrap()) else {
                fails.push(format!("{} [step {i}]: no decision at step {at}", id(case)));
                continue;
            };
            let returns = c.refund.refund().await;
            check!(
                fails,
                case,
                format!("refund returns [step {i}]"),
                returns,
                step["expect"]["returns"].as_bool().unwrap()
            );
        } else if let Some(at) = step["finish"].as_u64() {
            let Some(c) = checks.get(&usize::try_from(at).unwrap()) else {
                fails.push(format!("{} [step {i}]: no decision at step {at}", id(case)));
                continue;
            };
            c.lease.finish().await;
            // SPEC F2: the handler answered this status.
            if let Some(status) = step["status"].as_u64() {
                let status = http::StatusCode::from_u16(u16::try_from(status).unwrap()).unwrap();
                c.refund.answered(status).await;
            }
            if let Some(w) = step["expect"]["leases_in_flight"].as_u64() {
                check!(
                    fails,
                    case,
                    format!("leases_in_flight [step {i}]"),
                    limiter.stats().leases_in_flight(),
                    w
                );
            }
        } else if let Some(at) = step["renew"].as_u64() {
            let Some(c) = checks.get(&usize::try_from(at).unwrap()) else {
                fails.push(format!("{} [step {i}]: no decision at step {at}", id(case)));
                continue;
            };
            let tick = c.lease.tick().await;
            check!(
                fails,
                case,
                format!("renewed [step {i}]"),
                tick == Renewal::Renewed,
                step["expect"]["renewed"].as_bool().unwrap()
            );
            if let Some(w) = step["expect"]["timed_out"].as_bool() {
                check!(
                    fails,
                    case,
                    format!("timed_out [step {i}]"),
                    tick == Renewal::TimedOut,
                    w
                );
            }
            let known = ["renewed", "timed_out"];
            for k in step["expect"]
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
            {
                if !known.contains(&k.as_str()) {
                    fails.push(format!("{} [step {i}]: unknown expectation {k}", id(case)));
                }
            }
        } else if let Some(at) = step["renew_hold"].as_u64() {
            let Some(h) = holds.get(&usize::try_from(at).unwrap()) else {
                fails.push(format!("{} [step {i}]: no hold at step {at}", id(case)));
                continue;
            };
            check!(
                fails,
                case,
                format!("renewed [step {i}]"),
                h.renew().await,
                step["expect"]["renewed"].as_bool().unwrap()
            );
        } else if let Some(t) = step.get("take_hold") {
            let at = usize::try_from(t["check"].as_u64().unwrap()).unwrap();
            let Some(c) = checks.get(&at) else {
                fails.push(format!("{} [step {i}]: no decision at step {at}", id(case)));
                continue;
            };
            let want = &step["expect"];
            let (policy, estimate, ttl) = (
                t["policy"].as_str().unwrap().to_owned(),
                num(&t["estimate"]),
                num(&t["ttl_ms"]) / 1000.0,
            );
            let hold = step["redis"]
                .as_array()
                .and_then(|calls| calls.iter().find_map(|c| c["hold"].as_str()));
            if let Some(name) = hold {
                // The hold's call is held (`expect: null`): its `release` step checks it.
                let d = c.decision.clone();
                let task = tokio::spawn(async move { d.hold(&policy, estimate, ttl).await });
                for _ in 0..1000 {
                    if store.holding(name) {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                if !store.holding(name) {
                    fails.push(format!(
                        "{} [step {i}]: the held call was never made",
                        id(case)
                    ));
                }
                held.insert(name.to_owned(), (i, Held::Hold(task)));
                continue;
            }
            let got = c.decision.hold(&policy, estimate, ttl).await;
            match (got, want["error"].as_str()) {
                (
                    Err(Error::InvalidArgument { .. } | Error::NotSettleLater { .. }),
                    Some("invalid_input"),
                ) => {}
                // SPEC G1, B2: a failed call, or one the open breaker kept from Redis
                (
                    Err(
                        Error::StoreUnavailable { .. }
                        | Error::Connection { .. }
                        | Error::Timeout { .. }
                        | Error::Server { .. },
                    ),
                    Some("store_error"),
                ) => {}
                (Err(e), _) => fails.push(format!("{} [step {i}]: hold failed: {e}", id(case))),
                (Ok(h), Some(_)) => fails.push(format!(
                    "{} [step {i}]: hold should have raised, got {h:?}",
                    id(case)
                )),
                (Ok(h), None) => {
                    compare_hold(case, i, fails, &h, &store.fill(want));
                    holds.insert(i, h);
                }
            }
        } else if let Some(t) = step.get("settle") {
            let at = usize::try_from(t["hold"].as_u64().unwrap()).unwrap();
            let Some(h) = holds.get(&at) else {
                fails.push(format!("{} [step {i}]: no hold at step {at}", id(case)));
                continue;
            };
            match h.settle(num(&t["actual"])).await {
                Err(e) => fails.push(format!("{} [step {i}]: settle failed: {e}", id(case))),
                Ok(st) => {
                    let want = &store.fill(&step["expect"]);
                    for (field, got) in [
                        ("remaining", st.remaining),
                        ("charged", st.charged),
                        ("reset_after", st.reset_after),
                    ] {
                        if let Some(w) = want.get(field) {
                            check!(fails, case, format!("{field} [step {i}]"), got, num(w));
                        }
                    }
                    if let Some(w) = want["settled"].as_bool() {
                        check!(fails, case, format!("settled [step {i}]"), st.settled, w);
                    }
                }
            }
        } else {
            fails.push(format!("{} [step {i}]: unknown step kind", id(case)));
        }
        for e in store.errors() {
            fails.push(format!("{} [step {i}]: {e}", id(case)));
        }
        for c in store.leftover() {
            fails.push(format!(
                "{} [step {i}]: listed call not made: {}",
                id(case),
                c["call"]
            ));
        }
    }
    for (_, (_, task)) in held.drain() {
        match task {
            Held::Check(t) => t.abort(),
            Held::Hold(t) => t.abort(),
        }
    }
    if let Some(want) = case["expect_stats"].as_object() {
        let s = limiter.stats();
        for (name, w) in want {
            let got = match name.as_str() {
                "checks" => s.checks(),
                "allowed" => s.allowed(),
                "limited" => s.limited(),
                "shadow_limited" => s.shadow_limited(),
                "store_errors" => s.store_errors(),
                "degraded" => s.degraded(),
                "deny_cache_hits" => s.deny_cache_hits(),
                "refunds" => s.refunds(),
                "refund_errors" => s.refund_errors(),
                "invalid_inputs" => s.invalid_inputs(),
                "leases_in_flight" => s.leases_in_flight(),
                "leases_expired" => s.leases_expired(),
                "leases_timed_out" => s.leases_timed_out(),
                "holds_lost" => s.holds_lost(),
                "holds" => s.holds(),
                "settlements" => s.settlements(),
                other => {
                    fails.push(format!("{}: unknown counter {other}", id(case)));
                    continue;
                }
            };
            check!(
                fails,
                case,
                format!("stats.{name}"),
                got,
                w.as_u64().unwrap()
            );
        }
    }
}

/// A call held by the store until a later `release` step: a check's or a hold's.
enum Held {
    Check(tokio::task::JoinHandle<Check>),
    Hold(tokio::task::JoinHandle<Result<Hold, Error>>),
}

// ---------------------------------------------------------------- startup.json

/// SPEC U1-U4: the store's check (what `TbClient::start` / `start_degraded` run), then the
/// limiter's (U3), against a store at 127.0.0.1:6379 that answers the listed calls.
async fn startup_case(case: &Value, fails: &mut Failures) {
    let l = &case["limiter"];
    let want = &case["expect"];
    let backend = match l["backend"].as_str() {
        None => BackendSetting::Auto,
        Some(word) => match word.parse() {
            Ok(b) => b,
            Err(e) => {
                fails.push(format!("{}: {e}", id(case)));
                return;
            }
        },
    };
    let config = ClientConfig {
        call_timeout: Duration::from_millis(50),
        backend,
        ..ClientConfig::default()
    };
    let store = FakeStore::new(Duration::from_millis(50)).with_client("127.0.0.1:6379", config);
    store.expect(&case["redis"]);
    let clock = ManualClock::new(1_764_456_268_000);
    let as_limiter = serde_json::json!({"limiter": l, "steps": []});
    let mut b = limiter_builder(&as_limiter, store.clone(), clock);
    if let Some(name) = l["name"].as_str() {
        b = b.name(name);
    }
    if l["tag"].as_bool() == Some(true) {
        b = b.hash_tag(|_| Some("t".to_owned()));
    }
    let limiter = b.build().unwrap();
    let degraded = l["start_degraded"].as_bool() == Some(true);
    let mut chosen = (None, None);
    let result = match redis_tb_client::startup::check_store(&store, degraded).await {
        Err(e) => Err(e),
        Ok(started) => {
            store.state.lock().unwrap().degraded = started.degraded;
            limiter.startup().await.map(|()| {
                // SPEC E6: told only of a start that passes.
                chosen = (started.backend, started.backend_log);
                started.log
            })
        }
    };
    // SPEC E6: the backend chosen (none after a degraded start, until its first call), in
    // the limiter's stats too, and its one line.
    let word = |b: Option<Backend>| b.map(Backend::as_str).map(str::to_owned);
    check!(
        fails,
        case,
        "backend",
        word(chosen.0),
        want["backend"].as_str().map(str::to_owned)
    );
    check!(
        fails,
        case,
        "stats.backend",
        word(limiter.stats().backend()),
        word(chosen.0)
    );
    check!(
        fails,
        case,
        "backend_log",
        chosen.1,
        want["backend_log"].as_str().map(str::to_owned)
    );
    match (result, want["error"].as_str()) {
        (Err(e), Some(line)) => {
            let got = e.to_string();
            if !line_matches(&got, line) {
                fails.push(format!(
                    "{}: the start failed with {got:?}, want {line:?}",
                    id(case)
                ));
            }
        }
        (Err(e), None) => fails.push(format!("{}: the start failed: {e}", id(case))),
        (Ok(log), Some(line)) => fails.push(format!(
            "{}: started (log {log:?}), want the error {line:?}",
            id(case)
        )),
        (Ok(log), None) => {
            check!(
                fails,
                case,
                "started",
                true,
                want["started"].as_bool().unwrap()
            );
            match (log.as_deref(), want["log"].as_str()) {
                (Some(got), Some(line)) if line_matches(got, line) => {}
                (None, None) => {}
                (got, line) => fails.push(format!("{}: logged {got:?}, want {line:?}", id(case))),
            }
        }
    }
    for e in store.errors() {
        fails.push(format!("{}: {e}", id(case)));
    }
    for c in store.leftover() {
        fails.push(format!("{}: listed call not made: {}", id(case), c["call"]));
    }
}

/// An expected line: `{reason}` stands for any non-empty text without a line break,
/// `{start_degraded}` for the option's name in Rust (`start_degraded`).
fn line_matches(got: &str, want: &str) -> bool {
    let want = want.replace("{start_degraded}", "start_degraded");
    match want.split_once("{reason}") {
        None => got == want,
        Some((head, tail)) => {
            got.len() > head.len() + tail.len()
                && got.starts_with(head)
                && got.ends_with(tail)
                && !got[head.len()..got.len() - tail.len()].contains('\n')
        }
    }
}

// ---------------------------------------------------------------- the runner

/// Cases of a rule this crate does not implement yet, each required to FAIL, on its SPEC E
/// field (a case that passes, or fails for another reason, is an error: take it off this
/// list). Empty since SPEC E, the script backend (issue 42), is in this crate.
const PENDING: [(&str, &str); 0] = [];

#[tokio::test]
async fn every_vector_file_passes() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("clients/vectors")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 7, "the vectors folder: {files:?}");
    let mut fails = Failures::new();
    let mut ids = HashSet::new();
    let mut ran = 0;
    let mut pending = 0;
    for path in &files {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let cases = doc["cases"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no cases"));
        for case in cases {
            if !ids.insert(id(case)) {
                fails.push(format!("{}: duplicate id", id(case)));
            }
            ran += 1;
            let mut local = Failures::new();
            match name.as_str() {
                "numbers.json" => numbers(case, &mut local),
                "config.json" => config(case, &mut local),
                "address.json" => address(case, &mut local),
                "keys.json" => keys_case(case, &mut local).await,
                "header_identity.json" => header_identity(case, &mut local).await,
                "response.json" => response(case, &mut local),
                "limiter.json" | "limiter-scripts.json" => limiter_case(case, &mut local).await,
                "startup.json" => startup_case(case, &mut local).await,
                other => {
                    fails.push(format!("{other}: no handler for this file"));
                    break;
                }
            }
            let id = id(case);
            match PENDING.iter().find(|(p, _)| *p == id) {
                None => fails.extend(local),
                // A pending case must fail, and on its SPEC E field (the runner's message
                // names "SPEC E"): one that passes, or fails for another reason, is an error.
                Some((_, rule)) => {
                    if local.is_empty() {
                        fails.push(format!("{id} passes: take it off PENDING (SPEC {rule})"));
                    } else if !local.iter().any(|f| f.contains("SPEC E")) {
                        fails.push(format!(
                            "{id} (pending, SPEC {rule}) fails for another reason:"
                        ));
                        fails.extend(local);
                    } else {
                        pending += 1;
                    }
                }
            }
        }
    }
    for (p, rule) in PENDING {
        if !ids.contains(p) {
            fails.push(format!(
                "{p} (SPEC {rule}) is PENDING but no vector has that id"
            ));
        }
    }
    assert!(
        fails.is_empty(),
        "{} of {ran} vector cases failed:\n{}",
        fails.len(),
        fails.join("\n")
    );
    eprintln!(
        "{} vector cases passed, {pending} pending (SPEC E) failed as required",
        ran - pending
    );
}

/// SPEC R6 (issue row D12), a case in the vectors' format that the shared files do not
/// hold yet: a probe stopped by the open breaker gives its claim back, so after the
/// cool-down, while the next probe is out, the same key is refused from the cache
/// (`Retry-After: 1`, R4) instead of reaching the failure mode. Proposed for
/// clients/vectors/limiter.json.
#[tokio::test]
async fn a_probe_stopped_by_the_breaker_keeps_the_entry() {
    let case: Value = serde_json::from_str(
        r#"{"id": "rs-r6-001", "rule": "R6", "title": "D12: the entry outlives a breaker-stopped probe",
        "limiter": {"policies": [{"name": "ip", "capacity": 2, "rate": 1, "cost": 1}],
                    "deny_cache": {"max_entries": 100}, "timeout_ms": 60000},
        "steps": [
          {"at_ms": 0, "check": {"peer": "203.0.113.9", "headers": {}},
           "redis": [{"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "reply": [0, 0, 1.5, 2]}],
           "expect": {"outcome": "limited", "from_cache": false}},
          {"at_ms": 1000, "check": {"peer": "198.51.100.7", "headers": {}},
           "redis": [{"call": ["TB.TAKE", "rl:ip:198.51.100.7", 2, 1, 1], "connection_error": true}],
           "expect": {"outcome": "store_error"}},
          {"at_ms": 1600, "check": {"peer": "203.0.113.9", "headers": {}}, "redis": [],
           "expect": {"outcome": "store_error", "from_cache": false}},
          {"at_ms": 2100, "check": {"peer": "203.0.113.9", "headers": {}},
           "redis": [{"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "hold": "p"}], "expect": null},
          {"at_ms": 2110, "check": {"peer": "203.0.113.9", "headers": {}}, "redis": [],
           "expect": {"outcome": "limited", "from_cache": true, "headers": {"retry-after": "1"}}},
          {"at_ms": 2120, "release": "p", "reply": [1, 1, 0, 1],
           "expect": {"outcome": "allowed", "from_cache": false}}
        ]}"#,
    )
    .unwrap();
    let mut fails = Failures::new();
    limiter_case(&case, &mut fails).await;
    assert!(fails.is_empty(), "{}", fails.join("\n"));
}
