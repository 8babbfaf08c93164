/**
 * Money as exact integer micro-units (API.md: "Costs are decimal numbers with at most 6 digits after
 * the point, at most 1e12; budgets are summed exactly (no binary floating point drift)").
 */
import { describe, expect, test } from 'vitest';
import { fromMicro, toMicro } from '../../src/core/money.js';

describe('toMicro', () => {
  test.each<[number, bigint]>([
    [0, 0n],
    [-0, 0n],
    [0.000001, 1n],
    [0.1, 100_000n],
    [0.25, 250_000n],
    [1, 1_000_000n],
    [123.456789, 123_456_789n],
    [999_999_999_999.999, 999_999_999_999_999_000n],
    [1e12, 1_000_000_000_000_000_000n],
  ])('%d is %d micro-units', (n, micro) => {
    expect(toMicro(n)).toEqual({ ok: true, value: micro });
  });

  test.each<[string, number]>([
    ['7 decimals', 0.1234567],
    ['a tiny number printed with an exponent', 1e-7],
    ['just over 1e12', 1e12 + 1],
    ['a negative number', -1],
    ['a tiny negative number', -0.000001],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['-Infinity', Number.NEGATIVE_INFINITY],
  ])('rejects %s', (_name, n) => {
    expect(toMicro(n).ok).toBe(false);
  });
});

describe('fromMicro', () => {
  test.each<[bigint, number]>([
    [0n, 0],
    [1n, 0.000001],
    [300_000n, 0.3],
    [1_500_000n, 1.5],
    [-1_500_000n, -1.5],
    [1_000_000_000_000_000_000n, 1e12],
  ])('%d micro-units are %d', (micro, n) => {
    expect(fromMicro(micro)).toBe(n);
  });

  test.each([0, 0.1, 0.3, 0.000001, 7.654321, 123456.5, 999_999_999_999.999, 1e12])('round-trips %d exactly', (n) => {
    const m = toMicro(n);
    expect(m.ok && fromMicro(m.value)).toBe(n);
  });
});

describe('sums are exact', () => {
  const micro = (n: number): bigint => {
    const m = toMicro(n);
    if (!m.ok) throw new Error(`${n} is not a cost`);
    return m.value;
  };

  test.each<[string, number[], number]>([
    ['0.1 + 0.2', [0.1, 0.2], 0.3],
    ['ten times 0.1', Array<number>(10).fill(0.1), 1],
    ['a thousand times 0.001', Array<number>(1000).fill(0.001), 1],
    ['1e12 - 0.000001 + 0.000001', [999_999_999_999.999, 0.000999, 0.000001], 1e12],
  ])('%s', (_name, parts, total) => {
    // The binary-float sum drifts for the first three; the micro-unit sum must not.
    const sum = parts.reduce((acc, n) => acc + micro(n), 0n);
    expect(sum).toBe(micro(total));
    expect(fromMicro(sum)).toBe(total);
  });
});
