/**
 * A Worker that checks a tool schema and validates args with the core's own code (issue 17), for
 * test/worker-bundle.test.ts to run in workerd, where code generation from strings is forbidden:
 * POST {schema, args} answers the rule findings and the failing arg paths. GET /eval tries
 * `new Function` itself, so the test can show that workerd refuses it.
 */
import { ArgsValidator } from '../../src/core/tool-args.js';
import { checkToolSchema } from '../../src/core/tool-schema.js';

export default {
  async fetch(request: Request): Promise<Response> {
    if (request.method === 'GET') {
      try {
        // eslint-disable-next-line @typescript-eslint/no-implied-eval -- the control: workerd must refuse this
        return Response.json({ evaluated: (new Function('return 1') as () => number)() });
      } catch (e) {
        return Response.json({ refused: e instanceof Error ? e.message : String(e) });
      }
    }
    const { schema, args } = (await request.json()) as { schema: Record<string, unknown>; args: unknown };
    const report = checkToolSchema(schema);
    return Response.json({ violations: report.violations, errors: new ArgsValidator(schema).check(args) });
  },
};
