//! Many clients hammering one bucket at one instant: exactly `capacity` are admitted.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Reply, Server};

fn hammer(
    server: &Server,
    threads: usize,
    per_thread: usize,
    args: &'static [&'static str],
    pipelined: bool,
) -> usize {
    let allowed = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let allowed = allowed.clone();
            let mut c = server.conn();
            scope.spawn(move || {
                if pipelined {
                    for _ in 0..per_thread {
                        c.send(args);
                    }
                }
                for _ in 0..per_thread {
                    let r = if pipelined { c.read() } else { c.cmd(args) };
                    match r.array()[0] {
                        Reply::Int(1) => {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                        Reply::Int(0) => {}
                        ref other => panic!("{other:?}"),
                    }
                }
            });
        }
    });
    allowed.load(Ordering::Relaxed)
}

#[test]
fn one_instant_many_clients_admit_exactly_capacity() {
    let s = Server::start();
    let n = hammer(
        &s,
        32,
        60,
        &["TB.TAKE", "hot", "500", "10", "1", "1764456268.5"],
        false,
    );
    assert_eq!(n, 500);
}

#[test]
fn pipelined_clients_admit_exactly_capacity() {
    let s = Server::start();
    let n = hammer(
        &s,
        16,
        200,
        &["TB.TAKE", "hot", "1000", "3", "1", "1764456268.5"],
        true,
    );
    assert_eq!(n, 1000);
}

#[test]
fn server_clock_clients_admit_capacity_plus_refill_only() {
    let s = Server::start();
    // Rate 1e-9/s: no whole token refills during the test, so exactly capacity pass.
    let n = hammer(
        &s,
        24,
        80,
        &["TB.TAKE", "hot", "777", "0.000000001", "1"],
        false,
    );
    assert_eq!(n, 777);
}

#[test]
fn fractional_takes_admit_exactly_what_fits() {
    let s = Server::start();
    // 0.25 is exact in binary: 100 / 0.25 = 400 takes fit.
    let n = hammer(
        &s,
        20,
        40,
        &["TB.TAKE", "hot", "100", "1", "0.25", "1764456268.5"],
        false,
    );
    assert_eq!(n, 400);
}
