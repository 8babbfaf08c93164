/**
 * Swagger UI's files for GET /docs, read once from the swagger-ui-dist package so the page loads no
 * script from another origin (src/http/docs.ts).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { DocsAssets } from '../http/docs.js';

const require = createRequire(import.meta.url);

/** The bundle and stylesheet of the installed swagger-ui-dist. */
export function loadDocsAssets(): DocsAssets {
  const read = (file: string): string => readFileSync(require.resolve(`swagger-ui-dist/${file}`), 'utf8');
  return { bundleJs: read('swagger-ui-bundle.js'), css: read('swagger-ui.css') };
}
