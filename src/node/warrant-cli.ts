/**
 * `npx warrant <command>`: one tool for operators and scripts.
 *
 *   tenant create NAME | list          the tenant CLI (same database as the server)
 *   api-keys create|list|revoke …      scoped API keys of a tenant (roles, expiry)
 *   keys rotate | list                 the key CLI
 *   audit verify [NAME]                the offline audit chain check
 *   mint | attenuate | approve | revoke   POST the JSON body read from stdin to a running server
 *   capability ID | audit-log [QUERY] | verify-audit   the reads
 *   inspect TOKEN [JWKS_URL]           decode a token; verify it offline against a JWKS
 *
 * Against a server: WARRANT_URL (default http://127.0.0.1:8080) and WARRANT_API_KEY (default: the
 * embedded database's `<data dir>/default-api-key`). Output is JSON on stdout; exit 0 on success,
 * 1 on an error answer (printed), 2 on bad usage.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WarrantClient, WarrantError, verifyOffline } from '../client/index.js';
import { readConfig } from './config.js';

const USAGE = `usage: warrant tenant|api-keys|keys|audit …  |  warrant mint|attenuate|approve|revoke < body.json
       warrant capability ID | audit-log [query] | verify-audit | inspect TOKEN [JWKS_URL]`;

/** Hands over to one of the existing CLIs, which read their arguments from process.argv. */
async function delegate(script: string, args: string[]): Promise<void> {
  process.argv = [process.argv[0] as string, script, ...args];
  await import(script);
}

function client(): WarrantClient {
  const config = readConfig(process.env);
  const keyFile = join(config.dataDir, 'default-api-key');
  const apiKey = process.env.WARRANT_API_KEY?.trim() || (existsSync(keyFile) ? readFileSync(keyFile, 'utf8').trim() : '');
  if (apiKey === '') throw new UsageError('set WARRANT_API_KEY (or run beside an embedded database with a default-api-key)');
  return new WarrantClient({ baseUrl: process.env.WARRANT_URL?.trim() || 'http://127.0.0.1:8080', apiKey });
}

class UsageError extends Error {}

function stdinJson(): unknown {
  const text = readFileSync(0, 'utf8');
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError('stdin must hold the JSON request body');
  }
}

function decodePart(part: string | undefined): unknown {
  try {
    return JSON.parse(Buffer.from(part ?? '', 'base64url').toString('utf8'));
  } catch {
    return null;
  }
}

async function run(command: string | undefined, args: string[]): Promise<unknown> {
  switch (command ?? '') {
    case 'mint':
      return client().mint(stdinJson() as never);
    case 'attenuate':
      return client().attenuate(stdinJson() as never);
    case 'approve':
      return client().approve(stdinJson() as never);
    case 'revoke':
      return { revoked: await client().revoke(stdinJson() as never) };
    case 'capability':
      if (args[0] === undefined) throw new UsageError('capability needs an ID');
      return client().capability(args[0]);
    case 'audit-log':
      return client().audit(Object.fromEntries(new URLSearchParams(args[0] ?? '')));
    case 'verify-audit':
      return client().verifyAudit();
    case 'inspect': {
      const token = args[0];
      if (token === undefined) throw new UsageError('inspect needs a TOKEN');
      const [header, payload] = token.split('.');
      const jwks = args[1] ?? `${process.env.WARRANT_URL?.trim() || 'http://127.0.0.1:8080'}/.well-known/jwks.json`;
      return { header: decodePart(header), payload: decodePart(payload), verification: await verifyOffline(token, new URL(jwks)) };
    }
    default:
      throw new UsageError(USAGE);
  }
}

async function main(argv: string[]): Promise<void> {
  const [command, ...args] = argv;
  const delegated: Record<string, string> = { tenant: './tenant-cli.js', 'api-keys': './api-keys-cli.js', keys: './keys-cli.js', audit: './audit-cli.js' };
  const script = command === undefined ? undefined : delegated[command];
  if (script !== undefined) return delegate(script, args);
  try {
    console.log(JSON.stringify(await run(command, args), null, 2));
    process.exit(0);
  } catch (e) {
    if (e instanceof UsageError) {
      console.error(e.message);
      process.exit(2);
    }
    if (e instanceof WarrantError) {
      console.log(JSON.stringify({ error: { status: e.status, code: e.code, message: e.message, ...e.details } }, null, 2));
      process.exit(1);
    }
    console.error(`warrant: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}

await main(process.argv.slice(2));
