/**
 * `npm run tenant -- create NAME` creates a tenant and prints its API key alone on the last line
 * (shown once; only its hash is stored). `npm run tenant -- list` lists tenants. Uses the same
 * database as the server: with embedded PGlite, run it while the server is stopped.
 */
import { createTenant } from '../service/tenants.js';
import { Store } from '../store/store.js';
import { readConfig, runMain } from './config.js';
import { openConfiguredDatabase } from './db.js';

const COMMAND = 'npm run tenant';
const HELP = {
  create: 'create NAME   a tenant and its first admin API key, printed alone on the last line (shown once)',
  list: 'list          the tenants, one `id<TAB>name` a line',
};
const USAGE = `usage: warrant tenant COMMAND (or, in a checkout: npm run tenant -- COMMAND)
  ${HELP.create}
  ${HELP.list}
Uses the server's database (DATABASE_URL, else the embedded one in WARRANT_DATA_DIR, refused while a server holds it).`;

async function main(args: string[]): Promise<number> {
  const [command, name] = args;
  if (args.includes('--help') || args.includes('-h')) {
    console.log(command === 'create' || command === 'list' ? `usage: warrant tenant ${HELP[command]}` : USAGE);
    return 0;
  }
  if (command !== 'create' && command !== 'list') {
    console.error(USAGE);
    return 2;
  }
  if (command === 'create' && (name === undefined || !/^[A-Za-z0-9._-]{1,64}$/.test(name))) {
    console.error('NAME must be 1 to 64 characters of A-Z, a-z, 0-9, ., _ and -');
    return 2;
  }
  const config = readConfig(process.env);
  const database = await openConfiguredDatabase(config, COMMAND);
  try {
    await database.migrate();
    const store = new Store(database.db);
    if (command === 'list') {
      for (const t of await store.listTenants()) console.log(`${t.id}\t${t.name}`);
      return 0;
    }
    // Named here rather than as the unique constraint's SQL error; the re-check after a failure
    // covers a tenant of that name created concurrently.
    const taken = (): Promise<boolean> => store.tenantByName(name as string).then((t) => t !== null);
    if (await taken()) {
      console.error(`a tenant named ${name} already exists`);
      return 1;
    }
    let created: Awaited<ReturnType<typeof createTenant>>;
    try {
      created = await createTenant(store, name as string, new Date());
    } catch (e) {
      if (!(await taken())) throw e;
      console.error(`a tenant named ${name} already exists`);
      return 1;
    }
    const { tenant, apiKey } = created;
    console.log(`created tenant ${tenant.name} (${tenant.id}); its API key, shown only this once:`);
    console.log(apiKey);
    return 0;
  } finally {
    await database.close();
  }
}

runMain('tenant', main);
