/**
 * `npm run bench:core`: in-process cost of Warrant's decisions on already verified capabilities
 * (approve evaluation, attenuation check), and of approve with the token verified cold (signature
 * and claims on every call, no token cache), against Biscuit verify+authorize of an equivalent token
 * (@biscuit-auth/biscuit-wasm), with ops/s and the ratio; plus the byte size of a typical root and
 * child token, and the cost of sealing a typical audit row (canonical JSON and SHA-256) with the
 * portable SHA-256 and with the server's native one (src/node/native-hash.ts). Run through
 * `node --experimental-wasm-modules` (the Biscuit package imports .wasm).
 */
import { Biscuit, AuthorizerBuilder, KeyPair, SignatureAlgorithm, type PublicKey } from '@biscuit-auth/biscuit-wasm';
import { checkAttenuation, type ChildSpec } from '../src/core/attenuate.js';
import { evaluateApprove, type ApproveRequest, type ChainLink } from '../src/core/approve.js';
import { canonicalObject, canonicalTarget } from '../src/core/objects.js';
import { canonicalPredicate } from '../src/core/predicate.js';
import type {
  CapabilityClaims,
  CanonicalObject,
  CanonicalPredicate,
  CanonicalTarget,
  RawObject,
  RawPredicate,
  RawTarget,
  VerifiedCapability,
} from '../src/core/types.js';
import { generateSigningJwk, loadKeyRing } from '../src/crypto/keys.js';
import { signToken, verifyToken } from '../src/crypto/tokens.js';
import { canonicalJson, newId, nobleSha256Bytes, nobleSha256Hex, portableBase64url, useBase64url, useSha256, useSha256Bytes } from '../src/crypto/hash.js';
import { interiorHash } from '../src/audit/merkle.js';
import { nativeBase64url, nativeSha256Bytes, nativeSha256Hex } from '../src/node/native-hash.js';
import { canonicalRow, hashedFields, sealRow, type HashedRow } from '../src/store/audit.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 2);
const NOW = Date.parse('2026-06-01T12:00:00Z');
const iat = NOW / 1000;

function must<T>(r: { ok: true; value: T } | { ok: false }): T {
  if (!r.ok) throw new Error('canonicalization failed in the bench fixture');
  return r.value;
}
const obj = (o: RawObject): CanonicalObject => must(canonicalObject(o));
const tgt = (t: RawTarget): CanonicalTarget => must(canonicalTarget(t));
const pred = (p: RawPredicate): CanonicalPredicate => {
  const c = canonicalPredicate(p);
  if (!c.ok) throw new Error('predicate fixture');
  return c.value;
};

/** Runs `f` repeatedly for about SECONDS and returns operations per second. */
function opsPerSecond(f: (i: number) => unknown): number {
  let n = 0;
  const until = performance.now() + SECONDS * 1000;
  let sink = 0;
  while (performance.now() < until) {
    for (let k = 0; k < 200; k += 1) if (f(n++) !== undefined) sink += 1;
  }
  if (sink < 0) console.log(sink);
  return n / SECONDS;
}

/** As `opsPerSecond`, for an asynchronous `f` (each call awaited before the next). */
async function opsPerSecondAsync(f: (i: number) => Promise<unknown>): Promise<number> {
  let n = 0;
  const until = performance.now() + SECONDS * 1000;
  while (performance.now() < until) {
    for (let k = 0; k < 50; k += 1) await f(n++);
  }
  return n / SECONDS;
}

async function main(): Promise<void> {
  const ring = await loadKeyRing({ keys: [await generateSigningJwk()] });
  const root: CapabilityClaims = {
    id: 'cap_01JDQ4V8Y8N3Z5K6P7R2S9T0AB',
    tenant: 'ten_01JDQ4V8Y8N3Z5K6P7R2S9T0AB',
    trajectory: 'traj-2026-06-01-7f3a',
    parent: null,
    depth: 0,
    rights: ['read', 'write', 'execute'],
    objects: [
      obj({ kind: 'path', prefix: '/workspace/traj-7f3a' }),
      obj({ kind: 'url', prefix: 'https://api.github.com/repos/acme/' }),
      obj({ kind: 'repo', name: 'github.com/acme/widgets' }),
    ],
    predicate: pred({
      max_cost: 1,
      budget: 25,
      max_calls: 500,
      max_depth: 3,
      args: [
        { kind: 'max', arg: 'timeout_ms', value: 30000 },
        { kind: 'max_length', arg: 'command', value: 8192 },
      ],
    }),
    iat,
    nbf: iat,
    exp: iat + 3600,
  };
  const child: CapabilityClaims = {
    ...root,
    id: 'cap_01JDQ4W2C5D6E7F8G9H0J1K2LM',
    trajectory: 'traj-2026-06-01-7f3a.sub-1',
    parent: root.id,
    depth: 1,
    rights: ['read', 'write'],
    objects: [obj({ kind: 'path', prefix: '/workspace/traj-7f3a/src' })],
    predicate: pred({
      max_cost: 0.5,
      budget: 5,
      max_calls: 100,
      max_depth: 1,
      args: [
        { kind: 'max', arg: 'timeout_ms', value: 10000 },
        { kind: 'max_length', arg: 'command', value: 4096 },
      ],
    }),
    exp: iat + 600,
  };
  // A typical child: a subdirectory, two rights, a budget, a call count and no argument bounds.
  const typicalChild: CapabilityClaims = {
    ...child,
    objects: [obj({ kind: 'path', prefix: '/workspace/traj-7f3a/src' })],
    predicate: pred({ budget: 5, max_calls: 100, max_depth: 1 }),
  };
  const typicalChildToken = await signToken(ring, typicalChild);
  const rootToken = await signToken(ring, root);
  const childToken = await signToken(ring, child);
  const verified = await verifyToken(ring, childToken);
  const parentVerified = await verifyToken(ring, rootToken);
  if (!verified.ok || !parentVerified.ok) throw new Error('fixture tokens do not verify');
  const cap: VerifiedCapability = verified.capability;

  const chain: ChainLink[] = [
    { id: root.id, revoked: false, budget: 25_000_000n, spent: 3_000_000n, maxCalls: 500, calls: 40 },
    { id: child.id, revoked: false, budget: 5_000_000n, spent: 1_000_000n, maxCalls: 100, calls: 12 },
  ];
  const requests: ApproveRequest[] = [
    {
      op: 'read',
      target: tgt({ kind: 'path', path: '/workspace/traj-7f3a/src/main.ts' }),
      cost: 10_000n,
      args: { timeout_ms: 5000, command: 'cat src/main.ts' },
    },
    {
      op: 'write',
      target: tgt({ kind: 'path', path: '/workspace/traj-7f3a/src/lib/util.ts' }),
      cost: 250_000n,
      args: { timeout_ms: 8000, command: 'apply patch' },
    },
    {
      op: 'read',
      target: tgt({ kind: 'path', path: '/workspace/traj-7f3a/src/../../../etc/passwd' }),
      cost: 10_000n,
      args: { timeout_ms: 5000, command: 'cat' },
    },
    { op: 'execute', target: tgt({ kind: 'path', path: '/workspace/traj-7f3a/src/run.sh' }), cost: 10_000n, args: { timeout_ms: 5000, command: './run.sh' } },
  ];
  const spec: ChildSpec = { rights: child.rights, objects: child.objects, predicate: child.predicate, exp: child.exp };

  const approveOps = opsPerSecond((i) => evaluateApprove(cap, requests[i % requests.length] as ApproveRequest, NOW, chain));
  // Cold: the token's signature verified and its claims parsed on every call, as Biscuit's figure
  // does (verifyToken keeps no cache; the server's TokenCache is what the line above leaves out).
  const approveColdOps = await opsPerSecondAsync(async (i) => {
    const v = await verifyToken(ring, childToken);
    if (!v.ok) throw new Error('fixture token does not verify');
    return evaluateApprove(v.capability, requests[i % requests.length] as ApproveRequest, NOW, chain);
  });
  const attenuateOps = opsPerSecond(() => checkAttenuation(parentVerified.capability, spec, NOW));

  // Biscuit: the same root (rights, objects, bounds) and the same child attenuation as a block.
  const kp = new KeyPair(SignatureAlgorithm.Ed25519);
  const builder = Biscuit.builder();
  builder.addCode(`
    right("read"); right("write"); right("execute");
    path_prefix("/workspace/traj-7f3a"); url_prefix("https://api.github.com/repos/acme/"); repo("github.com/acme/widgets");
    check if time($t), $t <= ${new Date(root.exp * 1000).toISOString()};
    check if operation($op), right($op);
    check if resource($r), path_prefix($p), $r.starts_with($p + "/") or resource($r), path_prefix($r);
    check if arg("timeout_ms", $v), $v <= 30000;
    check if cost($c), $c <= 1000000;
  `);
  const block = Biscuit.block_builder();
  block.addCode(`
    check if operation($op), ["read", "write"].contains($op);
    check if resource($r), $r.starts_with("/workspace/traj-7f3a/src/");
    check if arg("timeout_ms", $v), $v <= 10000;
    check if cost($c), $c <= 500000;
    check if time($t), $t <= ${new Date(child.exp * 1000).toISOString()};
  `);
  const biscuitToken = builder.build(kp.getPrivateKey()).appendBlock(block).toBase64();
  const publicKey: PublicKey = kp.getPublicKey();
  const biscuitCheck = (i: number): number => {
    const req = requests[i % requests.length] as ApproveRequest;
    const token = Biscuit.fromBase64(biscuitToken, publicKey);
    const ab = new AuthorizerBuilder();
    const path = req.target.kind === 'path' ? req.target.path : '';
    ab.addCode(
      `time(${new Date(NOW).toISOString()}); operation("${req.op}"); resource("${path}"); arg("timeout_ms", ${Number(req.args.timeout_ms)}); cost(${req.cost}); allow if true;`,
    );
    const authorizer = ab.buildAuthenticated(token);
    let out = 0;
    try {
      out = authorizer.authorize();
    } catch (e) {
      if (process.env.BENCH_DEBUG) console.log(i, e);
      out = -1;
    }
    authorizer.free(); // buildAuthenticated consumed the builder
    token.free();
    return out;
  };
  // Warm up first: a cold first run can exceed Biscuit's default 1 ms run limit.
  for (let i = 0; i < 200; i += 1) biscuitCheck(i);
  // The fixture must decide alike: grant, grant, deny (outside), deny (execute not held by the child).
  const biscuitDecisions = requests.map((_, i) => biscuitCheck(i) >= 0);
  const warrantDecisions = requests.map((r) => evaluateApprove(cap, r, NOW, chain).decision === 'grant');
  if (JSON.stringify(biscuitDecisions) !== JSON.stringify(warrantDecisions))
    throw new Error(`fixtures disagree: biscuit ${biscuitDecisions.join()}, warrant ${warrantDecisions.join()}`);
  const biscuitOps = opsPerSecond(biscuitCheck);

  const line = (name: string, ops: number): string => `${name.padEnd(40)} ${Math.round(ops).toLocaleString('en-US').padStart(12)} ops/s`;
  console.log(line('warrant approve (verified capability)', approveOps));
  console.log(line('warrant approve (cold: verify+approve)', approveColdOps));
  console.log(line('warrant attenuation check', attenuateOps));
  console.log(line('biscuit verify+authorize (wasm)', biscuitOps));
  console.log(
    `token bytes: root ${rootToken.length}, child ${childToken.length} (with two argument bounds), typical child ${typicalChildToken.length}; biscuit root+block ${biscuitToken.length}`,
  );
  // A grant's audit row as the writer seals it (~1 KiB hashed: target, arguments, ids).
  const row: HashedRow = {
    tenantId: 'ten_4PGm3pY0dYl8hJ2x0m1QZw',
    treeId: 'cap_f-41dx0UGdt-LB_AzE5TCg',
    seq: 1234,
    id: 'aud_0qkqV6rY1r1m3e7gq2c9xw',
    at: new Date(NOW),
    event: 'approve',
    decision: 'grant',
    reasonCode: null,
    capabilityId: 'cap_H3HHgfGuEqiShF2iQSytyA',
    parentId: 'cap_f-41dx0UGdt-LB_AzE5TCg',
    trajectoryId: 'traj-child-0042',
    op: 'read',
    target: { kind: 'path', path: '/workspace/t-1/src/main.py' },
    cost: '10000',
    callId: 'call_7f3c2a',
    detail: {
      requested: { kind: 'path', path: '/workspace/t-1/./src/main.py' },
      args: { timeout_ms: 5000, pattern: 'TODO|FIXME', files: ['a.py', 'b.py'] },
      charged: ['cap_f-41dx0UGdt-LB_AzE5TCg', 'cap_H3HHgfGuEqiShF2iQSytyA'],
    },
    keyId: 'key_9w2Xc0pQ1uVbN4mLk7tR6A',
    requestId: 'req_3bVqL9xZ2mN8pK1wJ5tY0A',
    rootTrajectoryId: 'traj-root-0042',
    prevHash: 'a'.repeat(64),
  };
  /** Runs `f` with `impl` behind sha256Hex, then puts the portable one back. */
  const withSha256 = <T>(impl: typeof nobleSha256Hex, f: () => T): T => {
    useSha256(impl);
    try {
      return f();
    } finally {
      useSha256(nobleSha256Hex);
    }
  };
  const sealOps = (impl: typeof nobleSha256Hex): number => withSha256(impl, () => opsPerSecond((i) => sealRow({ ...row, seq: i })));
  if (withSha256(nativeSha256Hex, () => sealRow(row).hash) !== sealRow(row).hash) throw new Error('native and portable SHA-256 disagree');
  const sealNoble = sealOps(nobleSha256Hex);
  const sealNative = sealOps(nativeSha256Hex);
  console.log(line('seal an audit row (@noble/hashes)', sealNoble));
  console.log(line('seal an audit row (node:crypto)', sealNative));
  console.log(
    `sealing one row: ${(1e6 / sealNoble).toFixed(1)} µs portable, ${(1e6 / sealNative).toFixed(1)} µs native (${sealRow(row).canonical.length} bytes hashed)`,
  );
  // The row's canonical text alone: the library over the hashed fields' object against the writer's fixed-order serializer.
  if (canonicalRow(row) !== canonicalJson(hashedFields(row))) throw new Error('canonicalRow and the library disagree');
  const textLibrary = opsPerSecond((i) => canonicalJson(hashedFields({ ...row, seq: i })));
  const textFixed = opsPerSecond((i) => canonicalRow({ ...row, seq: i }));
  console.log(line('row text, canonicalize over hashedFields', textLibrary));
  console.log(line('row text, canonicalRow (fixed key order)', textFixed));
  console.log(`row text: ${(1e6 / textLibrary).toFixed(1)} µs by the library, ${(1e6 / textFixed).toFixed(1)} µs by canonicalRow`);
  // A fresh id (two an approval: its request's and its audit row's), encoded by jose (btoa) and by Buffer.
  const idOps = (impl: typeof portableBase64url): number => {
    useBase64url(impl);
    try {
      return opsPerSecond(() => newId('aud'));
    } finally {
      useBase64url(portableBase64url);
    }
  };
  const idPortable = idOps(portableBase64url);
  const idNative = idOps(nativeBase64url);
  console.log(`a new id: ${(1e6 / idPortable).toFixed(2)} µs base64url by jose, ${(1e6 / idNative).toFixed(2)} µs by Buffer`);
  // An interior node of the audit Merkle tree (the checkpointer hashes about two nodes a row), by @noble/hashes and node:crypto.
  const left = nobleSha256Bytes(new Uint8Array([1]));
  const right = nobleSha256Bytes(new Uint8Array([2]));
  const nodeOps = (impl: typeof nobleSha256Bytes): number => {
    useSha256Bytes(impl);
    try {
      return opsPerSecond(() => interiorHash(left, right));
    } finally {
      useSha256Bytes(nobleSha256Bytes);
    }
  };
  const nodePortable = nodeOps(nobleSha256Bytes);
  const nodeNative = nodeOps(nativeSha256Bytes);
  console.log(`a Merkle node: ${(1e6 / nodePortable).toFixed(2)} µs by @noble/hashes, ${(1e6 / nodeNative).toFixed(2)} µs by node:crypto`);
  console.log(`core/biscuit ratio: ${(approveOps / biscuitOps).toFixed(0)} (cached token), ${(approveColdOps / biscuitOps).toFixed(1)} (cold, like for like)`);
}

await main();
