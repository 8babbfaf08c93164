/**
 * `npm run keys -- rotate` appends a new active signing key to `keys/signing-keys.json` and keeps
 * the old ones for verification; `npm run keys -- list` shows the kids. Restart the server to use
 * the new key. (With `WARRANT_SIGNING_KEYS`, rotate the JWK set you pass instead.) `--audit` does the
 * same for the audit checkpoint keys (`keys/audit-keys.json`, `WARRANT_AUDIT_KEYS`).
 */
import { readConfig, runMain } from './config.js';
import { listKeyFile, rotateKeyFile } from './keyfile.js';

async function main(args: string[]): Promise<number> {
  const config = readConfig(process.env);
  const kind = args.includes('--audit') ? 'audit' : 'signing';
  args = args.filter((a) => a !== '--audit');
  if (args.length !== 1) args = [];
  if (args[0] === 'rotate') {
    const kid = await rotateKeyFile(config.keysDir, kind);
    console.log(`new active key ${kid}; older keys are kept to verify. Restart the server to sign with it.`);
    return 0;
  }
  if (args[0] === 'list') {
    for (const k of listKeyFile(config.keysDir, kind)) console.log(`${k.kid}${k.active ? '\tactive' : ''}`);
    return 0;
  }
  console.error('usage: npm run keys -- rotate | list [--audit]');
  return 2;
}

runMain('keys', main);
