/**
 * A small HTTP proxy in front of a real server that counts the requests it forwards, by path and
 * query: what a client fetched is then an observation, not a mocked function's call log.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface CountingProxy {
  /** e.g. `http://127.0.0.1:40123` */
  readonly url: string;
  /** How many requests for `path` (with its query, as sent) were forwarded so far. */
  count(path: string): number;
  close(): Promise<void>;
}

/** Starts a proxy that forwards every request to `target` (an origin), on `port` (default: a free one). */
export async function startCountingProxy(target: string, port = 0): Promise<CountingProxy> {
  const counts = new Map<string, number>();
  const server = createServer((req, res) => {
    const path = req.url ?? '/';
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const headers = Object.fromEntries(
        Object.entries(req.headers).flatMap(([k, v]) => (typeof v === 'string' && k !== 'host' && k !== 'connection' ? [[k, v]] : [])),
      );
      const body = chunks.length === 0 ? undefined : Buffer.concat(chunks);
      fetch(target + path, { method: req.method ?? 'GET', headers, ...(body === undefined ? {} : { body }) })
        .then(async (upstream) => {
          const text = Buffer.from(await upstream.arrayBuffer());
          res.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/octet-stream' });
          res.end(text);
        })
        .catch(() => {
          res.writeHead(502);
          res.end();
        });
    });
  });
  await new Promise<void>((ready) => server.listen(port, '127.0.0.1', ready));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    count: (path) => counts.get(path) ?? 0,
    close: () =>
      new Promise((done) => {
        // Clients keep connections alive; close() alone would wait for them.
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}
