/// <reference types="vitest/config" />
import { defineConfig } from 'vite';
import react from '@vitejs/plugin-react';

// Two pages: the dashboard (index.html, served at / with an SPA fallback) and
// GraphiQL (graphiql.html, served at /graphiql). GraphiQL and its Monaco
// workers live only in the second page's chunks; the dashboard's graph view is
// a lazy chunk (React.lazy). Builds are deterministic: content-hashed names,
// no timestamps, no absolute paths.
export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    reportCompressedSize: false,
    chunkSizeWarningLimit: 5000,
    rolldownOptions: {
      input: {
        index: 'index.html',
        graphiql: 'graphiql.html',
      },
      output: {
        // React is shared by both pages: its own long-cached chunk.
        codeSplitting: {
          groups: [{ name: 'react', test: /node_modules[\\/](react|react-dom|scheduler)[\\/]/ }],
        },
      },
      onLog(level, log, handler) {
        // GraphiQL's packages carry React Compiler directives that bundling drops, harmlessly.
        if (log.code === 'MODULE_LEVEL_DIRECTIVE') return;
        handler(level, log);
      },
    },
  },
  worker: {
    format: 'es',
  },
  server: {
    // `npm run dev`: the dashboard on :5173, the API of a local converge
    // (CONVERGE_API, default http://127.0.0.1:8080) proxied, websocket too.
    proxy: {
      '/graphql': {
        target: process.env.CONVERGE_API ?? 'http://127.0.0.1:8080',
        ws: true,
        changeOrigin: true,
      },
    },
  },
  test: {
    // Pure modules run in node; component tests opt into jsdom with a @vitest-environment comment.
    environment: 'node',
    include: ['src/**/*.test.{ts,tsx}'],
    restoreMocks: true,
    testTimeout: 30_000,
  },
});
