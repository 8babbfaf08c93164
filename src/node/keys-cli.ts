/**
 * `npm run keys -- rotate` appends a new active signing key to `keys/signing-keys.json` and keeps
 * the old ones for verification; `npm run keys -- list` shows the kids. Restart the server to use
 * the new key. (With `WARRANT_SIGNING_KEYS`, rotate the JWK set you pass instead.) `--audit` does the
 * same for the audit checkpoint keys (`keys/audit-keys.json`, `WARRANT_AUDIT_KEYS`).
 * `npm run keys -- reseal` runs the re-seal sweep the server runs at each start
 * (src/service/reseal.ts) against its database: for deployments with no Node server, such as Workers.
 */
import { existsSync } from 'node:fs';
import { resealAll } from '../service/reseal.js';
import { readConfig, runMain } from './config.js';
import { openConfiguredDatabase } from './db.js';
import { keyFile, listKeyFile, loadKeys, rotateKeyFile } from './keyfile.js';

const COMMAND = 'npm run keys -- reseal';
const HELP = {
  rotate: 'rotate [--audit]   append a new active key to the ring; older keys are kept to verify (restart the server to sign with it)',
  list: 'list [--audit]     the key ids of the ring, the active one marked',
  reseal:
    "reseal             seal tools and pending approvals sealed by an older signing key again under the active one, in the server's database (the server does it at each start)",
};
const USAGE = `usage: warrant keys COMMAND [--audit] (or, in a checkout: npm run keys -- COMMAND)
  ${HELP.rotate}
  ${HELP.list}
  ${HELP.reseal}
The signing keys are in WARRANT_KEYS_DIR/signing-keys.json; --audit: the audit checkpoint keys (audit-keys.json).`;

async function main(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    const command = args.find((a) => a === 'rotate' || a === 'list' || a === 'reseal');
    console.log(command === undefined ? USAGE : `usage: warrant keys ${HELP[command]}`);
    return 0;
  }
  const config = readConfig(process.env);
  const kind = args.includes('--audit') ? 'audit' : 'signing';
  args = args.filter((a) => a !== '--audit');
  if (args.length !== 1) args = [];
  if (args[0] === 'reseal' && kind === 'signing') {
    // Never a generated ring: a new key holds none of the seals.
    if (config.signingKeys === undefined && !existsSync(keyFile(config.keysDir))) {
      console.error(`keys: no signing keys in ${config.keysDir} (nor WARRANT_SIGNING_KEYS)`);
      return 1;
    }
    const keys = await loadKeys(config, () => {});
    const database = await openConfiguredDatabase(config, COMMAND);
    try {
      await database.migrate();
      const n = await resealAll(database.db, keys);
      console.log(`sealed again under ${keys.activeKid}: ${n.tools} tool versions, ${n.approvals} pending approvals`);
      if (n.notHeld > 0)
        console.log(`${n.notHeld} rows sealed under another key do not hold their seal (changed in the database, or their key is retired): left as they are`);
      return 0;
    } finally {
      await database.close();
    }
  }
  if (args[0] === 'rotate') {
    const kid = await rotateKeyFile(config.keysDir, kind);
    console.log(`new active key ${kid}; older keys are kept to verify. Restart the server to sign with it.`);
    return 0;
  }
  if (args[0] === 'list') {
    for (const k of listKeyFile(config.keysDir, kind)) console.log(`${k.kid}${k.active ? '\tactive' : ''}`);
    return 0;
  }
  console.error(USAGE);
  return 2;
}

runMain('keys', main);
