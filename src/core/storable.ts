/**
 * What the store can keep unchanged. Postgres text and jsonb hold neither NUL nor an unpaired
 * surrogate (half of a UTF-16 pair has no UTF-8 form). Anything a decision writes must pass: the
 * writer commits many callers' decisions, of every tenant, in one transaction, and one value the
 * store refuses fails all of them.
 */

/** A high surrogate not followed by a low one, or a low one not after a high one. */
const LONE = String.raw`[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]`;
const LONE_SURROGATE = new RegExp(LONE);
const UNSTORABLE_ALL = new RegExp(String.raw`\0|${LONE}`, 'g');

/** Whether the store keeps `s` unchanged. */
export const storable = (s: string): boolean => !s.includes('\0') && !LONE_SURROGATE.test(s);

/** The caller's text made storable, for a record of it: NUL as `%00`, an unpaired surrogate as U+FFFD. */
export const storableText = (s: string): string => s.replace(UNSTORABLE_ALL, (ch) => (ch === '\0' ? '%00' : '\ufffd'));

/** `s` cut to at most `max` UTF-16 units, never through a surrogate pair (a cut half is unstorable). */
export function cutAt(s: string, max: number): string {
  if (s.length <= max) return s;
  const last = s.charCodeAt(max - 1);
  return s.slice(0, last >= 0xd800 && last <= 0xdbff ? max - 1 : max);
}

/**
 * Adds to `out` each place in `root` the store could not keep: a string or key holding NUL or an
 * unpaired surrogate, a number that is not finite, and (once, at its first path) nesting deeper
 * than `maxDepth`. `path` names the root (`args`, `input_schema`); keys are joined with dots and
 * never echoed when they are themselves the problem. Iterative: a 64 KiB body can nest thousands deep.
 */
export function unstorableIn(root: unknown, path: string, out: { path: string; message: string }[], maxDepth = Infinity): void {
  const stack: [unknown, string, number][] = [[root, path, 0]];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [v, at, depth] = item;
    if (typeof v === 'string') {
      if (!storable(v)) out.push({ path: at, message: 'must not contain NUL or unpaired surrogates' });
    } else if (typeof v === 'number') {
      if (!Number.isFinite(v)) out.push({ path: at, message: 'must be a finite number' });
    } else if (typeof v === 'object' && v !== null) {
      if (depth >= maxDepth) {
        out.push({ path: at, message: `nested deeper than ${maxDepth}` });
        return;
      }
      for (const [k, x] of Object.entries(v)) {
        if (!storable(k)) out.push({ path: at, message: 'a key must not contain NUL or unpaired surrogates' });
        else stack.push([x, `${at}.${k}`, depth + 1]);
      }
    }
  }
}
