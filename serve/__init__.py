"""The Ray Serve application: FastAPI ingress, deployments (narrator, search, gate) and the MCP server."""
