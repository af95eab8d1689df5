// sandlot's config for E2B's JS SDK suite (not E2B's: theirs is packages/js-sdk/vitest.config.mts at
// tag e2b@2.45.0). Its `unit`, `template` and `connectionConfig` projects as E2B defines them; its
// `browser` project (tests/runtimes/browser, Playwright's downloaded Chromium) is left out, as are
// the Cloudflare runtime suites, which have configs of their own (see ../README.md).
import { defineConfig } from 'vitest/config'
import { config } from 'dotenv'

const env = config()
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['tests/**/*.test.ts'],
          exclude: [
            'tests/runtimes/**',
            'tests/template/**',
            'tests/connectionConfig.test.ts',
          ],
          isolate: true,
          globals: false,
          testTimeout: 30_000,
          environment: 'node',
          bail: 0,
          setupFiles: ['tests/globalFetchFallback.setup.ts'],
          server: {},
          deps: {
            interopDefault: true,
          },
          env: {
            ...(process.env as Record<string, string>),
            ...env.parsed,
          },
        },
      },
      {
        test: {
          name: 'template',
          include: ['tests/template/**/*.test.ts'],
          globals: false,
          testTimeout: 180_000,
          environment: 'node',
          setupFiles: ['tests/globalFetchFallback.setup.ts'],
        },
      },
      {
        test: {
          name: 'connectionConfig',
          include: ['tests/connectionConfig.test.ts'],
          globals: false,
          isolate: true,
          testTimeout: 10_000,
          environment: 'node',
        },
      },
    ],
  },
})
