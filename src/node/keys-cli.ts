/**
 * `npm run keys -- rotate` appends a new active signing key to `keys/signing-keys.json` and keeps
 * the old ones for verification; `npm run keys -- list` shows the kids. Restart the server to use
 * the new key. (With `WARRANT_SIGNING_KEYS`, rotate the JWK set you pass instead.) `--audit` does the
 * same for the audit checkpoint keys (`keys/audit-keys.json`, `WARRANT_AUDIT_KEYS`).
 */
import { readConfig, runMain } from './config.js';
import { listKeyFile, rotateKeyFile } from './keyfile.js';

const HELP = {
  rotate: 'rotate [--audit]   append a new active key to the ring; older keys are kept to verify (restart the server to sign with it)',
  list: 'list [--audit]     the key ids of the ring, the active one marked',
};
const USAGE = `usage: warrant keys COMMAND [--audit] (or, in a checkout: npm run keys -- COMMAND)
  ${HELP.rotate}
  ${HELP.list}
The signing keys are in WARRANT_KEYS_DIR/signing-keys.json; --audit: the audit checkpoint keys (audit-keys.json).`;

async function main(args: string[]): Promise<number> {
  if (args.includes('--help') || args.includes('-h')) {
    const command = args.find((a) => a === 'rotate' || a === 'list');
    console.log(command === undefined ? USAGE : `usage: warrant keys ${HELP[command]}`);
    return 0;
  }
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
  console.error(USAGE);
  return 2;
}

runMain('keys', main);
