/**
 * Costs and budgets as exact integer micro-units. docs/api.md: costs are decimal numbers with at most
 * 6 digits after the point, at most 1e12, "so budgets are summed exactly".
 */
import { err, ok, type Result } from './types.js';

export const MICRO_PER_UNIT = 1_000_000n;
export const MAX_COST = 1e12;

/**
 * Converts a JSON number to micro-units. The number's shortest round-trip decimal form is the value
 * the client sent (JSON numbers arrive as doubles), so "0.1" is exactly 100000 micro-units.
 */
export function toMicro(n: number): Result<bigint> {
  if (!Number.isFinite(n)) return err('must be a finite number');
  if (n < 0) return err('must be ≥ 0');
  if (n > MAX_COST) return err('must be at most 1e12');
  const text = Object.is(n, -0) ? '0' : String(n);
  // Doubles ≤ 1e12 print without an exponent unless they are tiny (< 1e-6), which have > 6 decimals.
  const m = /^(\d+)(?:\.(\d{1,6}))?$/.exec(text);
  if (m === null) return err('must have at most 6 digits after the decimal point');
  const whole = BigInt(m[1] ?? '0');
  const frac = BigInt((m[2] ?? '').padEnd(6, '0'));
  return ok(whole * MICRO_PER_UNIT + frac);
}

/** Micro-units back to a JSON number (exact for every value `toMicro` accepts). */
export function fromMicro(micro: bigint): number {
  const negative = micro < 0n;
  const abs = negative ? -micro : micro;
  const frac = (abs % MICRO_PER_UNIT).toString().padStart(6, '0').replace(/0+$/, '');
  const text = `${negative ? '-' : ''}${abs / MICRO_PER_UNIT}${frac === '' ? '' : `.${frac}`}`;
  return Number(text);
}
