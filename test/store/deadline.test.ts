/** The deadline helper (src/store/deadline.ts): bounded waits that never leave a rejection unobserved. */
import { describe, expect, test } from 'vitest';
import { Deadline, DeadlineExceeded, within } from '../../src/store/deadline.js';

describe('within', () => {
  test('the work, when it settles first', async () => {
    await expect(within(Deadline.in(1000), Promise.resolve(7))).resolves.toBe(7);
    await expect(within(Deadline.in(1000), Promise.reject(new Error('boom')))).rejects.toThrow('boom');
  });

  test('DeadlineExceeded when the deadline passes first; a late rejection of the work is observed', async () => {
    const late = new Promise((_, reject) => setTimeout(() => reject(new Error('late')), 30));
    await expect(within(Deadline.in(5), late)).rejects.toBeInstanceOf(DeadlineExceeded);
    // An unobserved rejection would fail the run (vitest reports unhandled rejections).
    await new Promise((r) => setTimeout(r, 50));
  });

  test('a deadline already passed rejects at once', async () => {
    const d = Deadline.in(0);
    expect(d.hasPassed()).toBe(true);
    expect(d.remaining()).toBe(0);
    await expect(within(d, new Promise(() => {}))).rejects.toBeInstanceOf(DeadlineExceeded);
  });
});
