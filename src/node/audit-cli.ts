/**
 * `npm run audit -- verify [NAME]`: recomputes the audit hash chain of every tenant (or of tenant
 * NAME) offline, straight from the database, as `GET /v1/audit/verify` does for one tenant. Prints a
 * line per tenant; exits 0 when every chain holds, 1 when one does not, 2 on bad usage. With embedded
 * PGlite, run it while the server is stopped.
 */
import { Reads } from '../service/authority.js';
import { Store } from '../store/store.js';
import { readConfig, runMain } from './config.js';
import { openConfiguredDatabase } from './db.js';

const USAGE = 'usage: npm run audit -- verify [TENANT_NAME]';

async function main(args: string[]): Promise<number> {
  const [command, name, ...rest] = args;
  if (command !== 'verify' || rest.length > 0) {
    console.error(USAGE);
    return 2;
  }
  const config = readConfig(process.env);
  const database = await openConfiguredDatabase(config);
  try {
    await database.migrate();
    const store = new Store(database.db);
    const reads = new Reads(store, () => new Date());
    const tenants = (await store.listTenants()).filter((t) => name === undefined || t.name === name);
    if (tenants.length === 0) {
      console.error(name === undefined ? 'no tenants' : `no tenant named ${name}`);
      return 2;
    }
    let allOk = true;
    for (const t of tenants) {
      const report = (await reads.verifyAudit(t.id)).body as { ok: boolean; entries: number; head?: string; first_bad_id?: string };
      allOk &&= report.ok;
      console.log(
        report.ok
          ? `ok\t${t.name}\tentries=${report.entries}\thead=${report.head}`
          : `TAMPERED\t${t.name}\tentries=${report.entries}\tfirst_bad_id=${report.first_bad_id}`,
      );
    }
    return allOk ? 0 : 1;
  } finally {
    await database.close();
  }
}

runMain('audit', main);
