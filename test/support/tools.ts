/**
 * The four-tool catalog of issue 17 (a coding agent's general tools) as registration bodies: a
 * shell, a windowed file viewer, an exact-replacement editor and a structured search. Each keeps the
 * five rules; tests break one rule at a time from here.
 */
/** An absolute path of plain segments: what the editor insists on. */
export const STRICT_PATH = '^/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$';

export const SHELL = {
  description: 'Run a shell command in a working directory.',
  input_schema: {
    type: 'object',
    additionalProperties: false,
    required: ['command', 'cwd', 'timeout_ms'],
    properties: {
      command: { type: 'string', minLength: 1, maxLength: 8192 },
      cwd: { type: 'string', maxLength: 4096, pattern: '^/' },
      timeout_ms: { type: 'integer', minimum: 1000, maximum: 300000 },
    },
  },
  side_effect: 'irreversible',
  right: 'execute',
  target: { pointer: '/cwd', kind: 'path' },
};

export const VIEW = {
  description: 'Show a window of a file.',
  input_schema: {
    type: 'object',
    additionalProperties: false,
    required: ['path'],
    properties: {
      path: { type: 'string', maxLength: 4096, pattern: '^/' },
      offset: { type: 'integer', minimum: 1, maximum: 1000000000, default: 1 },
      limit: { type: 'integer', minimum: 1, maximum: 500, default: 200 },
    },
  },
  side_effect: 'read_only',
  right: 'read',
  target: { pointer: '/path', kind: 'path' },
};

export const EDIT = {
  description: 'Replace one exact occurrence of old_str with new_str in a file.',
  input_schema: {
    type: 'object',
    additionalProperties: false,
    required: ['path', 'old_str', 'new_str'],
    properties: {
      path: { type: 'string', maxLength: 4096, pattern: STRICT_PATH },
      old_str: { type: 'string', minLength: 1, maxLength: 65536 },
      new_str: { type: 'string', maxLength: 65536 },
    },
  },
  side_effect: 'destructive',
  right: 'write',
  target: { pointer: '/path', kind: 'path' },
};

export const SEARCH = {
  description: 'Search files under a path for a pattern.',
  input_schema: {
    type: 'object',
    additionalProperties: false,
    required: ['pattern', 'path'],
    properties: {
      pattern: { type: 'string', minLength: 1, maxLength: 512 },
      path: { type: 'string', maxLength: 4096, pattern: '^/' },
    },
  },
  side_effect: 'read_only',
  right: 'read',
  target: { pointer: '/path', kind: 'path' },
};

export const CATALOG = { shell: SHELL, view: VIEW, edit: EDIT, search: SEARCH } as const;

/** A deep copy of a catalog tool, changed by `edit`. */
export function variant<T>(tool: T, edit: (t: T) => void): T {
  const copy = structuredClone(tool);
  edit(copy);
  return copy;
}
