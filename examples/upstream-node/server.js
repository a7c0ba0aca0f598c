// A minimal order service in Node.js (no dependencies) to put behind
// "idem proxy". It knows nothing about idempotency: every POST /orders it
// receives is one execution, counted, so a test or a person can see how
// many times the effect really happened.
//
//   node server.js [port]            (default 9000; 0 picks a free port)
//
// Endpoints:
//   POST /orders    creates an order: 201 {"order_id", "execution", ...}
//                   X-Upstream-Delay-Ms: N   answer after N ms (counted at once)
//                   X-Upstream-Fail: 500     answer 500 (still counted)
//                   X-Upstream-Size: N       pad the body to N bytes
//   GET  /count     {"executions": N, "by_key": {"<Idempotency-Key>": n, ...}}
//   GET  /healthz   200 ok
//
// The first line on standard output is "listening on http://HOST:PORT".
'use strict';
const http = require('node:http');

let executions = 0;
const byKey = new Map();

function send(res, status, obj, pad) {
  let body = JSON.stringify(obj);
  if (pad && pad > body.length) {
    body = JSON.stringify(Object.assign({ pad: 'x'.repeat(pad - body.length - 10) }, obj));
  }
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(body);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://upstream');
  if (req.method === 'GET' && url.pathname === '/healthz') {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('ok\n');
    return;
  }
  if (req.method === 'GET' && url.pathname === '/count') {
    send(res, 200, { executions, by_key: Object.fromEntries(byKey) });
    return;
  }
  if (req.method === 'POST' && url.pathname === '/orders') {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let order;
      try {
        order = raw === '' ? {} : JSON.parse(raw);
      } catch (e) {
        send(res, 400, { error: 'body is not JSON' });
        return;
      }
      // The effect: counted as soon as the request is accepted.
      executions += 1;
      const n = executions;
      const key = req.headers['idempotency-key'] || '';
      byKey.set(key, (byKey.get(key) || 0) + 1);
      const delay = Number(req.headers['x-upstream-delay-ms'] || 0);
      const fail = req.headers['x-upstream-fail'];
      const size = Number(req.headers['x-upstream-size'] || 0);
      const answer = () => {
        if (fail) {
          send(res, Number(fail) || 500, { error: 'upstream failure requested', execution: n });
          return;
        }
        res.setHeader('Location', '/orders/ord_' + n);
        send(res, 201, {
          order_id: 'ord_' + n,
          execution: n,
          idempotency_key: key,
          tenant: req.headers['x-tenant-id'] || '',
          order,
        }, size);
      };
      if (delay > 0) setTimeout(answer, delay); else answer();
    });
    return;
  }
  send(res, 404, { error: 'not found' });
});

server.keepAliveTimeout = 120000;
server.headersTimeout = 125000;
const port = Number(process.argv[2] || process.env.PORT || 9000);
server.listen(port, '127.0.0.1', () => {
  const a = server.address();
  process.stdout.write('listening on http://' + a.address + ':' + a.port + '\n');
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => server.close(() => process.exit(0)));
}
