/** MCP tool annotations to side-effect classes (issue 17), MCP's defaults included. */
import { describe, expect, test } from 'vitest';
import { fromMcpTool, sideEffectOf } from '../../src/client/index.js';

describe('MCP annotations → side-effect class', () => {
  test.each([
    ['no annotations (MCP defaults: destructive, not idempotent)', undefined, 'irreversible'],
    ['readOnlyHint', { readOnlyHint: true }, 'read_only'],
    ['readOnlyHint wins over the others', { readOnlyHint: true, destructiveHint: true }, 'read_only'],
    ['not destructive and idempotent', { destructiveHint: false, idempotentHint: true }, 'idempotent'],
    ['not destructive, not idempotent (additive)', { destructiveHint: false }, 'destructive'],
    ['destructive and idempotent', { idempotentHint: true }, 'destructive'],
    ['destructive, not idempotent', { destructiveHint: true, idempotentHint: false }, 'irreversible'],
  ] as const)('%s', (_name, annotations, expected) => {
    expect(sideEffectOf(annotations)).toBe(expected);
  });

  test('a registration keeps the schema and takes the right and target given', () => {
    const inputSchema = { type: 'object', additionalProperties: false, required: ['path'], properties: { path: { type: 'string', maxLength: 9 } } };
    expect(
      fromMcpTool({ name: 'read_file', inputSchema, annotations: { readOnlyHint: true } }, { right: 'read', target: { pointer: '/path', kind: 'path' } }),
    ).toEqual({
      name: 'read_file',
      registration: {
        description: 'read_file',
        input_schema: inputSchema,
        side_effect: 'read_only',
        right: 'read',
        target: { pointer: '/path', kind: 'path' },
      },
    });
  });
});
