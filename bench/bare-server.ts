/**
 * The baseline of `npm run bench:http`: a bare Hono JSON POST endpoint on @hono/node-server that
 * parses the same approve bodies and answers a JSON object of the same shape, with no checks.
 */
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

const app = new Hono();
let n = 0;
app.post('/v1/approve', async (c) => {
  const body = await c.req.json<{ op?: string }>();
  n += 1;
  return c.json({ decision: 'grant', reason: null, capability_id: body.op ?? null, audit_id: `aud_${n}`, budget_remaining: null, calls_remaining: null });
});
serve({ fetch: app.fetch, port: Number(process.env.PORT ?? 0), hostname: '127.0.0.1' }, (info) => {
  process.stdout.write(`${JSON.stringify({ msg: `listening on http://127.0.0.1:${info.port}`, port: info.port })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
