/**
 * The object keys of a request body that Warrant refuses before any route sees it: `__proto__`
 * (zod's records skip it silently, so `args: {"__proto__": {...}}` would pass unchecked) and a key
 * written twice in one object. JSON.parse keeps the last of repeated keys; a driver or tool that
 * parses the same text keeping the first would act on arguments Warrant never checked. I-JSON
 * (RFC 7493 §2.3) forbids repeated names for this reason.
 */
import { getNodePath, parseTree, type Node } from 'jsonc-parser';
import type { FieldError } from '../service/errors.js';

/** The first refused key of `body` (the parse of `text`), or undefined. */
export function refusedKey(text: string, body: unknown): FieldError | undefined {
  const { proto, keys } = walkKeys(body);
  if (proto !== undefined) return { path: proto, message: 'unknown field' };
  // A body repeats a key exactly when its text has more members than its parsed objects have keys:
  // counting is cheap, and only a body that fails it is parsed again to name the key.
  return memberCount(text) === keys ? undefined : { path: repeatedKeyPath(text), message: 'repeated key' };
}

/**
 * The path of the first own `__proto__` key, if any, and the number of keys of all objects.
 * Iterative: bodies may nest deeply.
 */
function walkKeys(root: unknown): { proto?: string; keys: number } {
  let keys = 0;
  if (typeof root !== 'object' || root === null) return { keys };
  const stack: [unknown, string][] = [[root, '']];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [value, path] = item;
    const isArray = Array.isArray(value);
    for (const key of Object.keys(value as object)) {
      if (!isArray) keys += 1;
      if (key === '__proto__') return { proto: path === '' ? key : `${path}.${key}`, keys };
      // Only containers are walked, so scalar leaves (most of a body, on every approve) cost no path string.
      const child = (value as Record<string, unknown>)[key];
      if (typeof child === 'object' && child !== null) stack.push([child, path === '' ? key : `${path}.${key}`]);
    }
  }
  return { keys };
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;

/**
 * The members written in a valid JSON text: its colons outside strings. A string is skipped to its
 * closing quote by indexOf (the first quote after an even run of backslashes): most of an approve
 * body is its token, one long string, which a loop over every character spent microseconds on.
 */
function memberCount(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i += 1) {
    const ch = text.charCodeAt(i);
    if (ch === COLON) n += 1;
    else if (ch === QUOTE) {
      let close = text.indexOf('"', i + 1);
      while (close !== -1 && escaped(text, close)) close = text.indexOf('"', close + 1);
      if (close === -1) return n;
      i = close;
    }
  }
  return n;
}

/** Whether the quote at `at` is escaped: an odd run of backslashes before it. */
function escaped(text: string, at: number): boolean {
  let k = at - 1;
  while (text.charCodeAt(k) === BACKSLASH) k -= 1;
  return (at - 1 - k) % 2 === 1;
}

/** The path of the first key repeated within one object of `text`, or '' for the body itself when none is found. */
function repeatedKeyPath(text: string): string {
  let root: Node | undefined;
  try {
    root = parseTree(text);
  } catch {
    return 'body'; // nested deeper than the parser's recursion goes: refused all the same
  }
  const stack: Node[] = root === undefined ? [] : [root];
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const seen = new Set<string>();
    for (const child of node.children ?? []) {
      if (node.type === 'object') {
        const [key, value] = child.children ?? [];
        if (seen.has(key?.value as string)) return getNodePath(key as Node).join('.');
        seen.add(key?.value as string);
        if (value !== undefined) stack.push(value);
      } else stack.push(child);
    }
  }
  return 'body';
}
