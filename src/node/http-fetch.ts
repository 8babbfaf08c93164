/**
 * A `fetch` for the command-line tool over node:http and node:https. Node 20 builds its global
 * fetch (undici) on first use, which costs about 0.2 s of CPU: most of a one-request CLI call
 * (bench/RESULTS.md, "CLI start"). It supports what WarrantClient sends (method, headers, a string
 * body) and answers with a real `Response`; a request that never reaches the server rejects as
 * fetch does, a TypeError whose `cause` is the socket error (ECONNREFUSED, ENOTFOUND, …).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';

/** GET or POST `input` with `init`'s method, headers and string body. */
export function httpFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  const url = new URL(input instanceof Request ? input.url : input);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return Promise.reject(new TypeError(`fetch failed: unsupported protocol ${url.protocol}`));
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers: Record<string, string> = {};
  new Headers(init.headers).forEach((value, name) => (headers[name] = value));
  return new Promise((done, fail) => {
    const req = send(url, { method: init.method ?? 'GET', headers, signal: init.signal ?? undefined }, (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.once('error', (e) => fail(new TypeError('fetch failed', { cause: e })));
      res.once('end', () => {
        const body = Buffer.concat(chunks);
        const noBody = res.statusCode === 204 || res.statusCode === 304;
        done(new Response(noBody ? null : body, { status: res.statusCode ?? 502, headers: res.headers as Record<string, string> }));
      });
    });
    req.once('error', (e) => fail(new TypeError('fetch failed', { cause: e })));
    req.end(typeof init.body === 'string' ? init.body : undefined);
  });
}
