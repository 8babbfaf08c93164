/**
 * GET /docs: the interactive API reference (Swagger UI over /openapi.json). Its script and styles
 * are served by this app from the swagger-ui-dist package (handed in by the entry, which can read
 * files), never from another origin; a Content-Security-Policy allows only this origin's scripts;
 * and the key typed into "Authorize" lives in the page's memory only (persistAuthorization off,
 * nothing in localStorage or sessionStorage), gone with the tab.
 */
import type { Hono } from 'hono';

/** swagger-ui-dist's files the page needs. */
export interface DocsAssets {
  readonly bundleJs: string;
  readonly css: string;
}

// Swagger UI sets style attributes from script, hence 'unsafe-inline' for styles only; its
// "Try it out" calls this origin (connect-src 'self'); its icons are inline SVG data URIs.
export const DOCS_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; " +
  "font-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const DOCS_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Warrant API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>
`;

// persistAuthorization stays false: Swagger UI would otherwise write the API key to localStorage.
const DOCS_INIT = `window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', persistAuthorization: false, tryItOutEnabled: false });\n`;

const headers = (type: string): Record<string, string> => ({
  'Content-Type': type,
  'Content-Security-Policy': DOCS_CSP,
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
});

/** Adds /docs and its assets; without assets (the Workers bundle) /docs answers 404 saying where it is served. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function addDocs(app: Hono<any>, assets: DocsAssets | undefined): void {
  if (assets === undefined) return;
  app.get('/docs', (c) => c.body(DOCS_HTML, 200, { ...headers('text/html; charset=utf-8'), 'Cache-Control': 'no-store' }));
  app.get('/docs/init.js', (c) => c.body(DOCS_INIT, 200, headers('text/javascript; charset=utf-8')));
  app.get('/docs/swagger-ui-bundle.js', (c) => c.body(assets.bundleJs, 200, headers('text/javascript; charset=utf-8')));
  app.get('/docs/swagger-ui.css', (c) => c.body(assets.css, 200, headers('text/css; charset=utf-8')));
}
