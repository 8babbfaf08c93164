/**
 * `npm run audit -- <command>` (also `npx warrant audit <command>`), straight from the database:
 *
 *   verify [TENANT] [--checkpoints FILE|DIR] [--keys JWKS_FILE]
 *       Checks every tenant's (or one tenant's, by name or id) audit rows, chains and leaf order against the signed
 *       checkpoints exported outside the database (default: WARRANT_CHECKPOINT_DIR, one
 *       <tenant id>.jsonl each), using only the audit public keys (a JWK set file, as
 *       /.well-known/warrant-audit-keys.json serves; default: the local audit key ring). Also reports
 *       a database whose own copy of a checkpoint differs from the exported one. Exit 0 when all
 *       hold, 1 naming the first bad row or checkpoint, 2 on bad usage.
 *   checkpoint
 *       Makes one checkpoint round now (a server does this every WARRANT_CHECKPOINT_INTERVAL_S; for
 *       deployments whose servers do not, e.g. Workers, run this from a scheduler). Exit 1 when a
 *       tenant's checkpoint failed, or its database no longer matches its exported checkpoints.
 *   receipt verify [FILE] --keys JWKS_FILE
 *       Verifies a receipt (GET /v1/audit/{id}/receipt; FILE or stdin) offline. Exit 0 or 1.
 *
 * With embedded PGlite, run verify and checkpoint while the server is stopped.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { importAuditKeys, parseLines, type AuditKeys, type CheckpointLine } from '../audit/checkpoint.js';
import { verifyReceipt } from '../audit/receipt.js';
import { Checkpointer } from '../audit/service.js';
import { verifyStoredAudit, type AuditReport } from '../audit/verify.js';
import { Store, type TenantRecord } from '../store/store.js';
import { log, readConfig, runMain, type Config } from './config.js';
import { useNativeSha256 } from './native-hash.js';
import { openConfiguredDatabase } from './db.js';
import { FileSink, sinkFile } from './file-sink.js';
import { keyFile, loadKeys } from './keyfile.js';

const COMMAND = 'npm run audit';
const HELP = {
  verify:
    'verify [TENANT] [--checkpoints FILE|DIR] [--keys JWKS_FILE]\n' +
    '      check the audit rows and chains against the exported signed checkpoints; exit 1 naming the first bad row',
  checkpoint: 'checkpoint\n      make one checkpoint round now (for deployments whose servers do not)',
  receipt: 'receipt verify [FILE] --keys JWKS_FILE\n      verify a receipt (FILE or stdin) offline',
};
const USAGE = `usage: warrant audit COMMAND (or, in a checkout: npm run audit -- COMMAND)
  ${HELP.verify}
  ${HELP.checkpoint}
  ${HELP.receipt}
With embedded PGlite, run verify and checkpoint while the server is stopped.`;

class UsageError extends Error {}

/** `--name value` options and the remaining positional arguments. */
function parseArgs(args: readonly string[], names: readonly string[]): { options: Map<string, string>; rest: string[] } {
  const options = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i] as string;
    if (!a.startsWith('--')) rest.push(a);
    else if (!names.includes(a) || args[i + 1] === undefined) throw new UsageError(`unknown option or missing value: ${a}`);
    else options.set(a, args[++i] as string);
  }
  return { options, rest };
}

async function auditKeysFrom(config: Config, file: string | undefined): Promise<AuditKeys> {
  if (file === undefined) {
    // Verifying never makes a key: a new one would vouch for nothing. Without keys, chains still
    // verify, and any checkpoint is reported as not signed by a known audit key.
    if (config.auditKeys === undefined && !existsSync(keyFile(config.keysDir, 'audit'))) {
      console.error(
        `audit: no audit keys in ${config.keysDir}; checkpoints cannot be checked (give --keys JWKS_FILE, the server's /.well-known/warrant-audit-keys.json)`,
      );
      return new Map();
    }
    return (await loadKeys(config, () => {}, 'audit')).verifyKeys;
  }
  try {
    return await importAuditKeys(JSON.parse(readFileSync(file, 'utf8')));
  } catch (e) {
    throw new UsageError(`${file}: not a JWK set of audit keys (${e instanceof Error ? e.message : String(e)})`);
  }
}

/**
 * The exported checkpoints of a tenant: from `--checkpoints` (a file, or a directory of
 * <tenant id>.jsonl), else from the sink directory; null when none were exported for it yet.
 */
function exported(given: string | undefined, sinkDir: string, tenant: TenantRecord, single: boolean): CheckpointLine[] | null {
  if (given !== undefined && !existsSync(given)) throw new UsageError(`--checkpoints ${given}: no such file or directory`);
  const path = given ?? sinkDir;
  const isDir = given === undefined || statSync(given).isDirectory();
  if (!isDir && !single) throw new UsageError('--checkpoints FILE needs a TENANT; give a directory for every tenant');
  const file = isDir ? sinkFile(path, tenant.id) : path;
  if (!existsSync(file)) return null;
  const parsed = parseLines(readFileSync(file, 'utf8'));
  if (!parsed.ok) throw new Error(`${file}: line ${parsed.line} is not a checkpoint`);
  return parsed.lines;
}

function reportLine(name: string, r: AuditReport, note: string): string {
  if (r.ok) {
    const at = r.checkpoint === null ? 'checkpoint=none' : `checkpoint=${r.checkpoint.n}\tcovered=${r.checkpoint.size}`;
    return `ok\t${name}\tentries=${r.entries}\t${at}\tuncovered=${r.uncovered}${note}`;
  }
  const where = [
    r.firstBadId === undefined ? '' : `first_bad_id=${r.firstBadId}`,
    r.firstBadCheckpoint === undefined ? '' : `first_bad_checkpoint=${r.firstBadCheckpoint}`,
  ];
  return `TAMPERED\t${name}\tentries=${r.entries}\t${where.filter((w) => w !== '').join('\t')}\t${r.reason}`;
}

async function verify(config: Config, store: Store, args: string[]): Promise<number> {
  const { options, rest } = parseArgs(args, ['--checkpoints', '--keys']);
  if (rest.length > 1) throw new UsageError(USAGE);
  const name = rest[0];
  const keys = await auditKeysFrom(config, options.get('--keys'));
  const tenants = (await store.listTenants()).filter((t) => name === undefined || t.name === name || t.id === name);
  if (tenants.length === 0) throw new UsageError(name === undefined ? 'no tenants' : `no tenant named ${name}`);
  let allOk = true;
  for (const t of tenants) {
    const file = exported(options.get('--checkpoints'), config.checkpointDir, t, name !== undefined);
    const report = await verifyStoredAudit(store.db, keys, t.id, file);
    allOk &&= report.ok;
    const past = report.ok ? report.fromDatabase : undefined;
    const notes = [
      file === null ? '(no exported checkpoints: checked against the database copy only)' : '',
      past === undefined || past.checkpoints === 0
        ? ''
        : `(checkpoints ${(file?.length ?? 0) + 1}..${(file?.length ?? 0) + past.checkpoints} and the ${past.rows} rows only they cover are from the database, not the export: signed by an audit key and extending the export, they hold against whoever writes the database, not against a holder of that key)`,
      past === undefined || past.unknownKey === 0
        ? ''
        : `(${past.unknownKey} later checkpoint(s) in the database are signed by audit keys not given: not checked, their rows count as uncovered)`,
    ];
    const note = notes
      .filter((x) => x !== '')
      .map((x) => `\t${x}`)
      .join('');
    console.log(reportLine(t.name, report, note));
  }
  // Checkpoints exported for a tenant the database no longer has: the tenant was deleted or renamed.
  const given = options.get('--checkpoints');
  const dir = given ?? config.checkpointDir;
  if (name === undefined && existsSync(dir) && statSync(dir).isDirectory()) {
    const known = new Set((await store.listTenants()).map((t) => t.id));
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.jsonl'))) {
      const id = f.slice(0, -'.jsonl'.length);
      if (known.has(id)) continue;
      allOk = false;
      console.log(`TAMPERED\t${id}\tcheckpoints were exported for tenant ${id}, which the database no longer has`);
    }
  }
  return allOk ? 0 : 1;
}

async function receipt(config: Config, args: string[]): Promise<number> {
  const { options, rest } = parseArgs(args, ['--keys']);
  const keysFile = options.get('--keys');
  if (rest[0] !== 'verify' || rest.length > 2 || keysFile === undefined) throw new UsageError(USAGE);
  const text = readFileSync(rest[1] ?? 0, 'utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new UsageError('the receipt is not JSON');
  }
  const check = await verifyReceipt(json, await auditKeysFrom(config, keysFile));
  console.log(JSON.stringify(check.ok ? { ok: true, checkpoint: check.checkpoint, row: check.row } : check, null, 2));
  return check.ok ? 0 : 1;
}

async function main(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  if (args.includes('--help') || args.includes('-h')) {
    const known = command === 'verify' || command === 'checkpoint' || command === 'receipt';
    console.log(known ? `usage: warrant audit ${HELP[command]}` : USAGE);
    return 0;
  }
  const config = readConfig(process.env);
  try {
    if (command === 'receipt') return await receipt(config, rest);
    if (command !== 'verify' && command !== 'checkpoint') throw new UsageError(USAGE);
    const database = await openConfiguredDatabase(config, COMMAND);
    try {
      await database.migrate();
      const store = new Store(database.db);
      if (command === 'verify') return await verify(config, store, rest);
      if (rest.length > 0) throw new UsageError(USAGE);
      const keys = await loadKeys(config, log, 'audit');
      const tenants = async (): Promise<string[]> => (await store.listTenants()).map((t) => t.id);
      const failed = await new Checkpointer({ db: database.db, keys, now: () => new Date(), sink: new FileSink(config.checkpointDir), tenants, log }).round();
      return failed === 0 ? 0 : 1;
    } finally {
      await database.close();
    }
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(e.message);
    return 2;
  }
}

useNativeSha256(); // verifying a long log hashes every row
runMain('audit', main);
