"""Deploying to Cloudflare: the Worker templates (the gateway Worker and the runtime
Workers) that `sandbox-workbench gateway init` renders."""
