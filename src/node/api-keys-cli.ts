/**
 * `npm run api-keys -- create TENANT NAME --role ROLE [--role ROLE …] [--ttl-s SECONDS]` prints a
 * new key of the tenant alone on the last line (shown once; only its hash is stored);
 * `list TENANT` shows the keys without secrets; `revoke TENANT KEY_ID` revokes one. Roles: runtime,
 * spawner, driver, auditor, admin. With embedded PGlite it is refused while the server holds the data
 * directory: use the server's admin API (`/v1/api-keys`) then.
 */
import { parseArgs } from 'node:util';
import { keyCreation, keyRevocation } from '../service/key-admin.js';
import { keyView, ROLES, type Role } from '../service/keys.js';
import { DecisionWriter } from '../store/writer.js';
import { Store } from '../store/store.js';
import { readConfig, runMain } from './config.js';
import { openConfiguredDatabase } from './db.js';

const COMMAND = 'npm run api-keys';
const HELP = {
  create: 'create TENANT NAME --role ROLE [--role ROLE …] [--ttl-s SECONDS]   a new key, printed alone on the last line (shown once)',
  list: 'list TENANT                                                        the keys of a tenant, without secrets (JSON lines)',
  revoke: 'revoke TENANT KEY_ID                                               revoke a key (Node servers refuse it at once, others within 30 s)',
};
const USAGE = `usage: warrant api-keys COMMAND (or, in a checkout: ${COMMAND} -- COMMAND)
  ${HELP.create}
  ${HELP.list}
  ${HELP.revoke}
roles: ${ROLES.join(', ')}`;

class Usage extends Error {}

interface Parsed {
  readonly command: 'create' | 'list' | 'revoke';
  readonly tenant: string;
  readonly arg?: string;
  readonly roles: Role[];
  readonly ttlS?: number;
}

function parse(args: string[]): Parsed {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { role: { type: 'string', multiple: true }, 'ttl-s': { type: 'string' } },
  });
  const [command, tenant, arg, ...rest] = positionals;
  if ((command !== 'create' && command !== 'list' && command !== 'revoke') || tenant === undefined || rest.length > 0) throw new Usage(USAGE);
  if (command !== 'list' && arg === undefined) throw new Usage(USAGE);
  const roles = values.role ?? [];
  for (const r of roles) if (!(ROLES as readonly string[]).includes(r)) throw new Usage(`unknown role ${r}; roles: ${ROLES.join(', ')}`);
  if (command === 'create' && roles.length === 0) throw new Usage('create needs at least one --role');
  if (command === 'create' && !/^[A-Za-z0-9._-]{1,64}$/.test(arg as string)) throw new Usage('NAME must be 1 to 64 characters of A-Z, a-z, 0-9, ., _ and -');
  const ttl = values['ttl-s'];
  if (ttl !== undefined && !/^[1-9]\d{0,9}$/.test(ttl)) throw new Usage('--ttl-s must be a positive whole number of seconds');
  return { command, tenant, ...(arg === undefined ? {} : { arg }), roles: roles as Role[], ...(ttl === undefined ? {} : { ttlS: Number(ttl) }) };
}

async function run(store: Store, p: Parsed): Promise<number> {
  const tenant = await store.tenantByName(p.tenant);
  if (tenant === null) {
    console.error(`no tenant named ${p.tenant}`);
    return 2;
  }
  const now = new Date();
  if (p.command === 'list') {
    for (const k of await store.listApiKeys(tenant.id)) console.log(JSON.stringify(keyView(k, now)));
    return 0;
  }
  // Key changes are decisions like the API's: each is an audit row (`detail.via: "cli"`, no key_id)
  // committed with the change, through a decision writer of this process's own.
  const writer = new DecisionWriter(store.db, { now: () => new Date() });
  if (p.command === 'revoke') {
    const revoked = await writer.submit(keyRevocation(tenant.id, p.arg as string, 'cli'));
    if (revoked === null) {
      console.error(`tenant ${p.tenant} has no key ${p.arg}`);
      return 1;
    }
    const { key, made } = revoked;
    const also = made.length === 0 ? '' : ` and the ${made.length} key(s) made from it: ${made.map((k) => `${k.id} (${k.name})`).join(', ')}`;
    console.log(`revoked ${key.id} (${key.name})${also}; Node servers on this database refuse them at once, others (Workers) within 30 s`);
    return 0;
  }
  const made = await writer.submit(
    keyCreation(tenant.id, { name: p.arg as string, roles: p.roles, ttl_s: p.ttlS, maker: null, creatorExpiresAt: null }, 'cli'),
  );
  if (made === null) throw new Error('a key with no maker was refused'); // only a key with a maker can be
  const { record, apiKey } = made;
  console.log(
    `created key ${record.id} (${record.name}) of ${p.tenant}, roles ${record.roles.join(', ')}, expires ${record.expiresAt?.toISOString() ?? 'never'}; shown only this once:`,
  );
  console.log(apiKey);
  return 0;
}

async function main(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    const command = args.find((a): a is keyof typeof HELP => a === 'create' || a === 'list' || a === 'revoke');
    console.log(command === undefined ? USAGE : `usage: warrant api-keys ${HELP[command]}\nroles: ${ROLES.join(', ')}`);
    return 0;
  }
  let parsed: Parsed;
  try {
    parsed = parse(args);
  } catch (e) {
    console.error(e instanceof Usage ? e.message : USAGE);
    return 2;
  }
  const database = await openConfiguredDatabase(readConfig(process.env), COMMAND);
  try {
    await database.migrate();
    return await run(new Store(database.db), parsed);
  } finally {
    await database.close();
  }
}

runMain('api-keys', main);
