/**
 * Readiness (GET /readyz): can decisions commit now? The check (reachable, answering and writable)
 * is bounded, so the probe answers within its bound even when the database is stalled, and checks
 * never pile up: while one is running, every probe waits on that one.
 */
import { Deadline, within } from './deadline.js';

/** The bound on a readiness answer (ms); /readyz must answer within 1 s, always. */
export const READINESS_BOUND_MS = 800;

export class ReadinessProbe {
  private running: Promise<boolean> | null = null;

  constructor(
    /** True when the database can commit a decision now; may throw or hang when it cannot. */
    private readonly check: () => Promise<boolean>,
    private readonly boundMs = READINESS_BOUND_MS,
  ) {}

  /** True when the check said so within the bound; false when it failed, said no, or took too long. */
  async isReady(): Promise<boolean> {
    const run = (this.running ??= this.check()
      .catch(() => false)
      .finally(() => {
        this.running = null;
      }));
    return within(Deadline.in(this.boundMs), run).catch(() => false);
  }
}
