import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// `npm run dev` serves the UI with hot reload and proxies the API (HTTP
// and WebSocket) to a running server: CHATGRAPH_URL, default
// http://127.0.0.1:8080.
const target = process.env.CHATGRAPH_URL ?? 'http://127.0.0.1:8080'

export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: 'dist/ui',
    emptyOutDir: true,
    chunkSizeWarningLimit: 1500,
  },
  server: {
    proxy: {
      '/api': {
        target,
        ws: true,
        changeOrigin: true,
        // The server checks the WebSocket Origin against its own host:
        // present the proxied upgrade as coming from it.
        configure: (proxy) => proxy.on('proxyReqWs', (req) => req.setHeader('origin', target)),
      },
      '/healthz': { target },
    },
  },
})
