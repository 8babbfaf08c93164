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
const USAGE = 'usage: npm run tenant -- create NAME | list';

async function main(args: string[]): Promise<number> {
  const [command, name] = args;
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
    const { tenant, apiKey } = await createTenant(store, name as string, new Date());
    console.log(`created tenant ${tenant.name} (${tenant.id}); its API key, shown only this once:`);
    console.log(apiKey);
    return 0;
  } finally {
    await database.close();
  }
}

runMain('tenant', main);
