/**
 * The five rules of a tool's input schema (issue 17), checked when a tool is registered. A schema is
 * read twice: by the model, which proposes arguments from it, and by the authority, which validates
 * every call against it; these rules make it serve both:
 *
 * 1. closed property sets (`additionalProperties: false`);
 * 2. every required field listed in `required` (a property the call may omit declares the `default`
 *    that stands for it; `required` names only declared properties);
 * 3. every type bounded: strings by `maxLength`, `pattern` or `enum`; numbers by `minimum` and
 *    `maximum`; arrays by `maxItems`;
 * 4. units and conventions in names (`timeout_ms`, not `timeout`): a warning, not a refusal;
 * 5. every union of objects tagged by a discriminator field (a required property whose value is one
 *    constant, different in each alternative).
 *
 * Rules 1, 2, 3 and 5 are checked on every nested schema and every violation is reported, each with
 * the JSON pointer of the schema at fault, as attenuation reports every widening. Every `pattern`
 * must also match in bounded time (ReDoS): each call's args are matched against it. Pure: no I/O.
 */
import { isSafe } from 'redos-detector';

/** Which rule a finding breaks, and how. */
export const TOOL_SCHEMA_CODES = [
  'not_object',
  'open_object',
  'required_missing',
  'required_unknown',
  'untyped',
  'string_unbounded',
  'number_unbounded',
  'array_unbounded',
  'untagged_union',
  'ref_unsupported',
  'pattern_invalid',
  'pattern_unsafe',
  'format_unsafe',
  'too_deep',
  'keyword_unsupported',
  'unit_missing',
] as const;

/** Applicators the checker does not walk: a schema using one could hide an unbounded value, so it is refused. */
const UNWALKED = [
  'not',
  'if',
  'then',
  'else',
  'prefixItems',
  'additionalItems',
  'contains',
  'propertyNames',
  'dependentSchemas',
  'dependencies',
  'unevaluatedProperties',
  'unevaluatedItems',
  '$dynamicRef',
  '$recursiveRef',
] as const;

/** Keywords that constrain nothing: a combinator's siblings may be these alone, or are checked as a schema of their own. */
const ANNOTATIONS = new Set([
  'title',
  'description',
  '$comment',
  'default',
  'examples',
  'deprecated',
  'readOnly',
  'writeOnly',
  '$id',
  '$schema',
  '$anchor',
  '$defs',
  'definitions',
  'discriminator',
]);
export type ToolSchemaCode = (typeof TOOL_SCHEMA_CODES)[number];

/** A breach of one rule: `field` is the JSON pointer of the schema at fault, from `input_schema`. */
export interface SchemaFinding {
  readonly rule: 1 | 2 | 3 | 4 | 5;
  readonly code: ToolSchemaCode;
  readonly field: string;
  readonly detail: string;
}

export interface SchemaReport {
  /** Breaches of rules 1, 2, 3 and 5 (and schemas this checker cannot read): the tool is refused. */
  readonly violations: SchemaFinding[];
  /** Rule 4: numeric fields named like durations or sizes without a unit. */
  readonly warnings: SchemaFinding[];
}

/** How deep (in JSON pointer segments) a schema may nest: every call's args are checked against it. */
const MAX_SCHEMA_DEPTH = 64;

/** Keywords whose values are instances, not schemas: a `pattern` inside them is data. */
const VALUE_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);

/** Keywords whose values map names to schemas: a member named like a keyword is still a schema. */
const SCHEMA_MAPS = new Set(['properties', '$defs', 'definitions', 'patternProperties', 'dependentSchemas']);

/** Formats whose check in @cfworker/json-schema 4.1.6 backtracks catastrophically (`url`: seconds on 30 characters). */
const UNSAFE_FORMATS = new Set(['url']);

/**
 * Bounds on the ReDoS analysis itself, so that checking a pattern cannot stall a registration: a
 * pattern not cleared within them is refused. (In Workers the clock stands still while code runs,
 * so there only `maxSteps` and the isolate's CPU limit bound it.)
 */
const REDOS_LIMITS = { maxSteps: 20_000, timeout: 250 } as const;

/**
 * The most one schema's patterns may take to analyse (ms), so that one registration of many slow
 * patterns cannot hold the event loop for every tenant: past it, the rest are refused.
 */
const REDOS_BUDGET_MS = 1000;

/** Verdicts by pattern text: a pattern is analysed once per process (registration, then each validator built). */
const patternVerdicts = new Map<string, 'pattern_invalid' | 'pattern_unsafe' | null>();

type Json = Record<string, unknown>;
const isJson = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);
const escape = (key: string): string => key.replace(/~/g, '~0').replace(/\//g, '~1');

/** Words that name a duration or a size: a numeric field named by one needs a unit (rule 4). */
const MEASURED = new Set([
  'timeout',
  'duration',
  'delay',
  'interval',
  'ttl',
  'wait',
  'elapsed',
  'age',
  'period',
  'expiry',
  'deadline',
  'size',
  'memory',
  'quota',
]);
/** Unit suffixes that settle what a number means. */
const UNITS = new Set([
  'ms',
  'us',
  'ns',
  's',
  'sec',
  'secs',
  'seconds',
  'min',
  'mins',
  'minutes',
  'h',
  'hours',
  'days',
  'bytes',
  'b',
  'kb',
  'kib',
  'mb',
  'mib',
  'gb',
  'gib',
  'chars',
  'lines',
  'tokens',
  'items',
  'pct',
  'percent',
]);

/** The words of a property name: snake, kebab and camel case alike, lower-cased. */
function words(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .filter((w) => w !== '');
}

/** Rule 4: a numeric property named like a duration or size, whose last word is not a unit. */
function lacksUnit(name: string): boolean {
  const w = words(name);
  const last = w[w.length - 1];
  return w.some((x) => MEASURED.has(x)) && last !== undefined && !UNITS.has(last);
}

class Checker {
  readonly violations: SchemaFinding[] = [];
  readonly warnings: SchemaFinding[] = [];

  constructor(private readonly root: Json) {}

  private breach(rule: SchemaFinding['rule'], code: ToolSchemaCode, field: string, detail: string): void {
    this.violations.push({ rule, code, field, detail });
  }

  /** A local `$ref` (`#/$defs/x`, `#/definitions/x`) resolved; anything else reported. */
  private resolve(s: Json, at: string, seen: Set<string>): Json | null {
    const ref = s.$ref;
    if (typeof ref !== 'string') return s;
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
    const defs = m === null ? undefined : this.root[m[1] as string];
    const target = m !== null && isJson(defs) ? defs[(m[2] as string).replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    if (!isJson(target) || seen.has(ref)) {
      this.breach(
        3,
        'ref_unsupported',
        at,
        `${at || '/'}: $ref ${JSON.stringify(ref).slice(0, 80)} is not a local definition this authority can follow (or it is recursive)`,
      );
      return null;
    }
    seen.add(ref);
    return this.resolve(target, at, seen);
  }

  walk(value: unknown, at: string, seen: Set<string> = new Set()): void {
    if (at.split('/').length > MAX_SCHEMA_DEPTH) {
      this.breach(3, 'too_deep', at, `${at}: schemas nest at most ${MAX_SCHEMA_DEPTH} keywords deep`);
      return;
    }
    if (value === true || !isJson(value)) {
      this.breach(3, 'untyped', at, `${at || '/'}: a schema that accepts anything is unbounded`);
      return;
    }
    const s = this.resolve(value, at, new Set(seen));
    if (s === null) return;
    const unwalked = UNWALKED.filter((k) => k in s);
    if (unwalked.length > 0) {
      this.breach(3, 'keyword_unsupported', at, `${at || '/'}: ${unwalked.join(', ')} cannot be checked for bounds (use properties, items and tagged unions)`);
      return;
    }
    const combinators = (['oneOf', 'anyOf', 'allOf'] as const).filter((k) => k in s);
    for (const k of combinators)
      if (!Array.isArray(s[k]) || (s[k] as unknown[]).length === 0) {
        this.breach(3, 'untyped', `${at}/${k}`, `${at}/${k}: an empty or malformed ${k} bounds nothing`);
        return;
      }
    // A combinator's siblings constrain the value too (an open object beside an allOf): they are checked as a schema of their own.
    if (combinators.length > 0) {
      const rest = Object.fromEntries(Object.entries(s).filter(([k]) => !ANNOTATIONS.has(k) && !(combinators as string[]).includes(k) && k !== '$ref'));
      // `type` alone only narrows what the alternatives allow.
      if (Object.keys(rest).some((k) => k !== 'type')) this.walk(rest, at, seen);
    }
    const union = Array.isArray(s.oneOf)
      ? { key: 'oneOf', alts: s.oneOf as unknown[] }
      : Array.isArray(s.anyOf)
        ? { key: 'anyOf', alts: s.anyOf as unknown[] }
        : null;
    if (union !== null) return this.union(union.alts, `${at}/${union.key}`, seen);
    if (Array.isArray(s.allOf)) {
      (s.allOf as unknown[]).forEach((part, i) => this.walk(part, `${at}/allOf/${i}`, seen));
      return;
    }
    if ('const' in s || Array.isArray(s.enum)) return; // a closed set of values is bounded
    const types = Array.isArray(s.type) ? (s.type as unknown[]) : s.type === undefined ? [] : [s.type];
    if (types.length === 0 || types.some((t) => typeof t !== 'string')) {
      this.breach(3, 'untyped', at, `${at || '/'}: no type (or enum/const), so nothing bounds it`);
      return;
    }
    for (const type of types as string[]) this.typed(s, type, at, seen);
  }

  private typed(s: Json, type: string, at: string, seen: Set<string>): void {
    const where = at || '/';
    switch (type) {
      case 'object':
        return this.object(s, at, seen);
      case 'array':
        if (!isNumber(s.maxItems)) this.breach(3, 'array_unbounded', at, `${where}: an array needs maxItems`);
        if (s.items === undefined || s.items === false) {
          if (s.items === undefined) this.breach(3, 'untyped', `${at}/items`, `${at}/items: an array needs a schema for its items`);
          return;
        }
        return this.walk(s.items, `${at}/items`, seen);
      case 'string':
        if (!isNumber(s.maxLength) && typeof s.pattern !== 'string')
          this.breach(3, 'string_unbounded', at, `${where}: a string needs maxLength, pattern or enum`);
        return;
      case 'number':
      case 'integer': {
        const low = isNumber(s.minimum) || isNumber(s.exclusiveMinimum);
        const high = isNumber(s.maximum) || isNumber(s.exclusiveMaximum);
        if (!low || !high) this.breach(3, 'number_unbounded', at, `${where}: a number needs minimum and maximum`);
        return;
      }
      case 'boolean':
      case 'null':
        return;
      default:
        this.breach(3, 'untyped', at, `${where}: unknown type ${JSON.stringify(type).slice(0, 40)}`);
    }
  }

  private object(s: Json, at: string, seen: Set<string>): void {
    const where = at || '/';
    const props = isJson(s.properties) ? s.properties : {};
    const required = Array.isArray(s.required) ? s.required.filter((r): r is string => typeof r === 'string') : [];
    if (s.additionalProperties !== false || s.patternProperties !== undefined)
      this.breach(1, 'open_object', at, `${where}: an object needs "additionalProperties": false (and no patternProperties)`);
    for (const name of required) {
      if (!Object.hasOwn(props, name))
        this.breach(2, 'required_unknown', `${at}/required`, `${at}/required: names ${JSON.stringify(name)}, which is not a property`);
    }
    for (const [name, prop] of Object.entries(props)) {
      const field = `${at}/properties/${escape(name)}`;
      if (!required.includes(name) && !(isJson(prop) && 'default' in prop))
        this.breach(2, 'required_missing', field, `${field}: list it in required, or give the default that stands for it when omitted`);
      if (isJson(prop) && lacksUnit(name) && (prop.type === 'number' || prop.type === 'integer'))
        this.warnings.push({
          rule: 4,
          code: 'unit_missing',
          field,
          detail: `${field}: a ${name} without a unit; name it like ${words(name).join('_')}_ms or _bytes`,
        });
      this.walk(prop, field, seen);
    }
  }

  /**
   * Every `pattern` and `format` anywhere in the schema: the validator applies them to any string it
   * meets there, whatever `type` says, beside an `enum` or a `$ref` too. A schema's `const`, `enum`,
   * `default` and `examples` hold data, skipped; the members of `properties`, `$defs` and the like are
   * schemas whatever they are named (a property called `default` is no keyword), and the names in
   * `patternProperties` are patterns too. Iterative: the body bounds the size.
   */
  scanStrings(schema: Json): void {
    const stack: [unknown, string, 'schema' | 'map'][] = [[schema, '', 'schema']];
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      const [value, at, kind] = item;
      if (Array.isArray(value)) value.forEach((v, i) => stack.push([v, `${at}/${i}`, 'schema']));
      if (!isJson(value)) continue;
      for (const [key, v] of Object.entries(value)) {
        const field = `${at}/${escape(key)}`;
        if (kind === 'map') {
          if (at.endsWith('/patternProperties')) this.pattern(key, field);
          stack.push([v, field, 'schema']);
        } else if (key === 'pattern' && typeof v === 'string') this.pattern(v, `${field}`);
        else if (key === 'format' && typeof v === 'string' && UNSAFE_FORMATS.has(v))
          this.breach(3, 'format_unsafe', field, `${field}: the "${v}" format check can take seconds on a short string; use a pattern`);
        else if (SCHEMA_MAPS.has(key)) stack.push([v, field, 'map']);
        else if (!VALUE_KEYWORDS.has(key)) stack.push([v, field, 'schema']);
      }
    }
  }

  /** Time spent on ReDoS analysis for this schema (ms): past REDOS_BUDGET_MS, patterns not yet cleared are refused. */
  private analysisMs = 0;

  private pattern(pattern: string, field: string): void {
    let fault = patternVerdicts.get(pattern);
    if (fault === undefined) {
      if (this.analysisMs > REDOS_BUDGET_MS) {
        this.breach(3, 'pattern_unsafe', field, `${field}: the schema's patterns could not all be checked in time; use fewer or simpler patterns`);
        return;
      }
      const started = Date.now();
      fault = patternFault(pattern);
      this.analysisMs += Date.now() - started;
      if (patternVerdicts.size >= 4096) patternVerdicts.clear(); // bounded; recomputed on demand
      patternVerdicts.set(pattern, fault);
    }
    if (fault === 'pattern_invalid') this.breach(3, fault, field, `${field}: not a valid regular expression (Unicode mode)`);
    if (fault === 'pattern_unsafe')
      this.breach(3, fault, field, `${field}: can backtrack catastrophically (ReDoS) on a long argument; make repeats and alternatives unambiguous`);
  }

  /** Rule 5: object alternatives tagged by one discriminator; scalar unions need no tag. */
  private union(alts: unknown[], at: string, seen: Set<string>): void {
    const resolved = alts.map((a, i) => (isJson(a) ? this.resolve(a, `${at}/${i}`, new Set(seen)) : null));
    const objects = resolved.filter((a) => a !== null && (a.type === 'object' || isJson(a.properties)));
    if (objects.length > 0 && discriminator(resolved) === null)
      this.breach(
        5,
        'untagged_union',
        at,
        `${at}: a union of objects needs a discriminator: a required property with one const value, different in each alternative`,
      );
    alts.forEach((a, i) => this.walk(a, `${at}/${i}`, seen));
  }
}

/**
 * Whether a pattern is a regular expression the validator can use (it reads patterns in Unicode
 * mode) and matches in bounded time: redos-detector looks for two ways through the pattern that
 * match the same input, the cause of exponential or polynomial backtracking (`^(a|a)*$`, `(a+)+$`,
 * an unanchored `a*b`). An analysis that fails is a refusal, never a pass.
 */
function patternFault(pattern: string): 'pattern_invalid' | 'pattern_unsafe' | null {
  let re: RegExp;
  try {
    re = new RegExp(pattern, 'u');
  } catch {
    return 'pattern_invalid';
  }
  try {
    return isSafe(re, REDOS_LIMITS).safe ? null : 'pattern_unsafe';
  } catch {
    return 'pattern_unsafe';
  }
}

/** The value of a tag property in an alternative: a required property with one constant value. */
function tagValue(alt: Json, name: string): unknown {
  const props = isJson(alt.properties) ? alt.properties : {};
  const p = props[name];
  if (!isJson(p) || !Array.isArray(alt.required) || !alt.required.includes(name)) return undefined;
  if ('const' in p) return p.const;
  return Array.isArray(p.enum) && p.enum.length === 1 ? p.enum[0] : undefined;
}

/** The property that tags every alternative with a distinct constant, or null. */
function discriminator(alts: readonly (Json | null)[]): string | null {
  const first = alts[0];
  if (first === null || first === undefined || !isJson(first.properties)) return null;
  for (const name of Object.keys(first.properties)) {
    const values = alts.map((a) => (a === null ? undefined : tagValue(a, name)));
    if (values.every((v) => v !== undefined) && new Set(values.map((v) => JSON.stringify(v))).size === values.length) return name;
  }
  return null;
}

/** Every breach of rules 1, 2, 3 and 5, and the rule-4 warnings, of a tool's input schema. */
export function checkToolSchema(schema: unknown): SchemaReport {
  if (!isJson(schema) || schema.type !== 'object') {
    return { violations: [{ rule: 1, code: 'not_object', field: '', detail: 'input_schema: a tool takes an object ("type": "object")' }], warnings: [] };
  }
  const c = new Checker(schema);
  c.walk(schema, '');
  c.scanStrings(schema);
  return { violations: c.violations, warnings: c.warnings };
}

/**
 * The property schema a JSON pointer into the args names, when it is a required string at every step
 * (the target of a call must always be there): null otherwise.
 */
export function targetProperty(schema: unknown, pointer: string): Json | null {
  if (!pointer.startsWith('/')) return null;
  let s: unknown = schema;
  for (const raw of pointer.slice(1).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isJson(s) || !isJson(s.properties) || !Array.isArray(s.required) || !s.required.includes(key)) return null;
    s = s.properties[key];
  }
  return isJson(s) && s.type === 'string' ? s : null;
}

/** The value at a JSON pointer (RFC 6901) into a value; undefined when absent. */
export function atPointer(value: unknown, pointer: string): unknown {
  if (pointer === '') return value;
  let v: unknown = value;
  for (const raw of pointer.slice(1).split('/')) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isJson(v) || !Object.hasOwn(v, key)) return undefined;
    v = v[key];
  }
  return v;
}
