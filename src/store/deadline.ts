/**
 * Deadlines for requests that need the database (issue 13): every such request is answered by its
 * deadline, so a database that is down or stalled costs a client at most the deadline, never the
 * length of the outage. Web-standard only (performance.now, setTimeout): it runs on Workers too.
 */

/** The default bound on answering a request that needs the database. */
export const DEFAULT_DEADLINE_MS = 2000;

/** A point in time (monotonic) by which a request must be answered. */
export class Deadline {
  private constructor(
    /** `performance.now()` milliseconds. */
    readonly at: number,
  ) {}

  /** The deadline `ms` milliseconds from now. */
  static in(ms: number): Deadline {
    return new Deadline(performance.now() + ms);
  }

  /** Milliseconds left, 0 once passed. */
  remaining(): number {
    return Math.max(0, this.at - performance.now());
  }

  hasPassed(): boolean {
    return this.remaining() === 0;
  }
}

/** The deadline passed before the work finished (the work itself may still be running). */
export class DeadlineExceeded extends Error {
  readonly code = 'deadline_exceeded';
}

/**
 * `work`, or a rejection with DeadlineExceeded once `deadline` passes first. The work is not
 * cancelled (a query already sent cannot be taken back); a late rejection of it is observed here,
 * so it is never an unhandled rejection.
 */
export function within<T>(deadline: Deadline, work: Promise<T>): Promise<T> {
  work.catch(() => undefined);
  if (deadline.hasPassed()) return Promise.reject(new DeadlineExceeded('the deadline passed'));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DeadlineExceeded('the deadline passed')), deadline.remaining());
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}
