// An HTTPS server that speaks HTTP/2 only (ALPN h2, no HTTP/1.1 fallback), for the network e2e
// tests' private internet (internet.sh's sibling: a test starts it inside its namespace with
// `ip netns exec`, on an address of that namespace). Node's built-in http2 module, no packages.
//
//   node h2server.mjs --bind <ip> [--port 443] --cert <pem> --key <pem> --log <file> [--label L]
//
// Every stream is answered 200 with the body
//   `host=<label> authority=<:authority> proto=<ALPN> conn=<n> got=<request body bytes>\n`
// (conn: the connection's number since start, so a test can tell streams on one connection),
// except:
//   /big?n=<bytes>   a body of that many bytes ('x'), in 64 KiB writes (flow control both ways)
//   /trailers        the body above, then the trailer `x-test-trailer: t1`
//   /reset           the stream is reset with INTERNAL_ERROR before any response
//   /goaway          a GOAWAY (NO_ERROR, this stream the last) is sent before the response
//   /slow            the response's headers, then nothing for 30 s (the client gives up first)
// Log lines (one per event, appended to --log):
//   `<peer> conn=<n> <method> <path> proto=<ALPN> authority=<:authority>` per stream, then
//   `<peer> hdr <name>=<value>` for each authorization or x-test-* field as received (raw: a
//   duplicated field is two lines), and `<peer> trailer <name>=<value>` for request trailers;
//   `<peer> conn=<n> rst <path> code=<n>` when a stream ends reset (by either side), and
//   `<peer> conn=<n> goaway code=<n>` when the client sends a GOAWAY.
// Prints "listening" on stdout once it listens.
import fs from 'node:fs';
import http2 from 'node:http2';

const args = {port: '443', label: ''};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const need of ['bind', 'cert', 'key', 'log']) {
  if (!args[need]) {
    console.error(`h2server: --${need} is required`);
    process.exit(2);
  }
}
const label = args.label || args.bind.split('.').pop();
const log = (line) => fs.appendFileSync(args.log, line + '\n');

let conns = 0;
const connId = new WeakMap();
const server = http2.createSecureServer({
  cert: fs.readFileSync(args.cert),
  key: fs.readFileSync(args.key),
  allowHTTP1: false,
  settings: {maxConcurrentStreams: 100},
});
server.on('session', (session) => {
  connId.set(session, ++conns);
  const peer = session.socket.remoteAddress;
  session.on('goaway', (code) => log(`${peer} conn=${connId.get(session)} goaway code=${code}`));
});
server.on('stream', (stream, headers, flags, rawHeaders) => {
  const session = stream.session;
  const peer = session.socket.remoteAddress;
  const conn = connId.get(session);
  const proto = session.alpnProtocol;
  const path = headers[':path'] || '';
  const authority = headers[':authority'] || '-';
  log(`${peer} conn=${conn} ${headers[':method']} ${path} proto=${proto} authority=${authority}`);
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i].toLowerCase();
    if (name === 'authorization' || name.startsWith('x-test-')) log(`${peer} hdr ${name}=${rawHeaders[i + 1]}`);
  }
  stream.on('trailers', (trailers) => {
    for (const [k, v] of Object.entries(trailers)) log(`${peer} trailer ${k}=${v}`);
  });
  stream.on('error', () => {});
  stream.on('close', () => {
    if (stream.rstCode) log(`${peer} conn=${conn} rst ${path} code=${stream.rstCode}`);
  });
  if (path === '/slow') {
    stream.respond({':status': 200, 'content-type': 'text/plain'});
    stream.write('started\n');
    const timer = setTimeout(() => stream.end('done\n'), 30000);
    stream.on('close', () => clearTimeout(timer));
    return;
  }
  if (path === '/reset') {
    stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    return;
  }
  let got = 0;
  stream.on('data', (chunk) => { got += chunk.length; });
  stream.on('end', () => {
    if (stream.destroyed) return;
    const body = `host=${label} authority=${authority} proto=${proto} conn=${conn} got=${got}\n`;
    const big = path.match(/^\/big\?n=(\d+)$/);
    if (big) {
      let left = Number(big[1]);
      stream.respond({':status': 200, 'content-type': 'application/octet-stream', 'content-length': left});
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const more = () => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          if (!stream.write(chunk.subarray(0, n))) return stream.once('drain', more);
        }
        stream.end();
      };
      more();
      return;
    }
    if (path === '/goaway') session.goaway(http2.constants.NGHTTP2_NO_ERROR, stream.id);
    const trailers = path === '/trailers';
    stream.respond({':status': 200, 'content-type': 'text/plain'}, {waitForTrailers: trailers});
    if (trailers) stream.on('wantTrailers', () => stream.sendTrailers({'x-test-trailer': 't1'}));
    stream.end(body);
  });
});
server.listen(Number(args.port), args.bind, () => console.log('listening'));
