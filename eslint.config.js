// ESLint flat config: typescript-eslint with type information (each file checked against its own
// tsconfig: src/core against src/core/tsconfig.json). An un-awaited promise is an error everywhere:
// a dropped audit write is a lost audit row (STYLE.md "Tooling").
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['node_modules/', 'dist/', '.wrangler/', '.data/', 'db/migrations/', 'keys/', 'coverage/'] },
  {
    files: ['src/**/*.ts', 'test/**/*.ts', 'bench/**/*.ts', '*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/return-await': ['error', 'in-try-catch'],
      '@typescript-eslint/switch-exhaustiveness-check': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // Interfaces and `async` without `await` (a function kept async for its callers' contract) are fine.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // Tests and benchmarks read response bodies typed `any` on purpose; the assertions check their shape.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
