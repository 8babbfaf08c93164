/**
 * A tool list as MCP servers publish it (`tools/list`: `name`, `description`, `inputSchema`,
 * `annotations`), turned into Warrant registrations (issue 17). MCP's annotations are hints, with
 * defaults that assume the worst (a tool is not read-only, may be destructive, is not idempotent);
 * the side-effect class follows them:
 *
 * - `readOnlyHint: true` → `read_only`;
 * - `destructiveHint: false` and `idempotentHint: true` → `idempotent`;
 * - `destructiveHint: false`, not idempotent (an additive tool: a retry would add again) → `destructive`,
 *   so that each call carries a call_id and a retry cannot repeat its effect;
 * - destructive (the default) and `idempotentHint: true` → `destructive`;
 * - destructive and not idempotent (both defaults) → `irreversible`: a person approves each call.
 *
 * The right and the target (a JSON pointer into the args, and its kind) are not in MCP's shape: the
 * caller gives them, for all tools or per tool.
 */

export type SideEffectClass = 'read_only' | 'idempotent' | 'destructive' | 'irreversible';

/** One tool of an MCP `tools/list` answer (the fields Warrant reads). */
export interface McpTool {
  readonly name: string;
  readonly description?: string;
  readonly inputSchema: Record<string, unknown>;
  readonly annotations?: { readonly readOnlyHint?: boolean; readonly idempotentHint?: boolean; readonly destructiveHint?: boolean };
}

/** What `PUT /v1/tools/{name}` takes. */
export interface ToolRegistration {
  readonly description: string;
  readonly input_schema: Record<string, unknown>;
  readonly side_effect: SideEffectClass;
  readonly right: 'read' | 'write' | 'execute' | 'connect';
  readonly target: { readonly pointer: string; readonly kind: 'path' | 'host' | 'repo' | 'url' };
}

/** The side-effect class MCP's annotations (and their defaults) imply. */
export function sideEffectOf(annotations: McpTool['annotations'] = {}): SideEffectClass {
  if (annotations.readOnlyHint === true) return 'read_only';
  const idempotent = annotations.idempotentHint === true;
  if (annotations.destructiveHint === false) return idempotent ? 'idempotent' : 'destructive';
  return idempotent ? 'destructive' : 'irreversible';
}

/** The registration of an MCP tool, given the right its calls need and where its target is. */
export function fromMcpTool(tool: McpTool, where: Pick<ToolRegistration, 'right' | 'target'>): { name: string; registration: ToolRegistration } {
  return {
    name: tool.name,
    registration: {
      description: tool.description ?? tool.name,
      input_schema: tool.inputSchema,
      side_effect: sideEffectOf(tool.annotations),
      right: where.right,
      target: where.target,
    },
  };
}
