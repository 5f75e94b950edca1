// A small closed-loop HTTP/1.1 keep-alive load generator: `connections` sockets, each
// sends its next request when the previous response is complete, with a distinct
// X-Forwarded-For per request (a ring of `addresses` client addresses) so a limiter
// works on a real spread of buckets. Latency is timed per request with hrtime (µs).
//
//   node loadgen.mjs <port> <connections> <seconds> <warmup seconds> [addresses] [path] [min requests]
// Measures for <seconds>, and on until at least [min requests] (default 100) responses
// came back (a stalled machine would otherwise leave a measurement empty), 60 s at most.
//
// Prints one JSON line: {requests, all, seconds, rps, statuses, p50_us, p90_us, p99_us}.
import net from 'node:net';

const [port, connections, seconds, warmup, addresses = '65536', pathArg = '/items/', minArg = '100'] = process.argv.slice(2);
const minRequests = Number(minArg);
const nAddr = Number(addresses);
const ring = [];
for (let a = 0; a < nAddr; a++) {
  const xff = `10.${(a >> 16) & 255}.${(a >> 8) & 255}.${a & 255}`;
  ring.push(Buffer.from(`GET ${pathArg}${a % 1000} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: ${xff}\r\n\r\n`, 'latin1'));
}
let next = Math.floor(Math.random() * nAddr);
let measuring = false;
let stopped = false;
let count = 0;
let all = 0; // every completed request, warm-up included (to compare with Redis' call counts)
const statuses = {};
const lat = [];
const HDR_END = Buffer.from('\r\n\r\n');
const CL = /\r\ncontent-length:\s*(\d+)/i;

function connect() {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port: Number(port), host: '127.0.0.1', noDelay: true });
    let buf = Buffer.alloc(0);
    let sent = 0n;
    const send = () => {
      if (stopped) { sock.end(); return; }
      const req = ring[next];
      next = next + 1 === nAddr ? 0 : next + 1;
      sent = process.hrtime.bigint();
      sock.write(req);
    };
    sock.on('connect', () => { resolve(sock); send(); });
    sock.on('error', (e) => { if (!stopped) reject(e); });
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      for (;;) {
        const end = buf.indexOf(HDR_END);
        if (end < 0) return;
        const head = buf.toString('latin1', 0, end);
        const m = CL.exec(head);
        const len = m ? Number(m[1]) : 0;
        const total = end + 4 + len;
        if (buf.length < total) return;
        const status = head.slice(9, 12);
        buf = buf.subarray(total);
        all++;
        if (measuring) {
          count++;
          statuses[status] = (statuses[status] ?? 0) + 1;
          lat.push(Number(process.hrtime.bigint() - sent) / 1000);
        }
        send();
      }
    });
  });
}

const socks = await Promise.all(Array.from({ length: Number(connections) }, connect));
await new Promise((r) => setTimeout(r, Number(warmup) * 1000));
measuring = true;
const t0 = process.hrtime.bigint();
await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
const cap = Date.now() + 60_000;
while (count < minRequests && Date.now() < cap) await new Promise((r) => setTimeout(r, 50));
measuring = false;
const elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
stopped = true;
for (const s of socks) s.destroy();
lat.sort((a, b) => a - b);
const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : null);
process.stdout.write(JSON.stringify({
  requests: count, all, seconds: elapsed, rps: count / elapsed, statuses,
  p50_us: q(0.5), p90_us: q(0.9), p99_us: q(0.99),
}) + '\n');
