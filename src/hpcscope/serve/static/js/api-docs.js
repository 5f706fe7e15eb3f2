// The API reference page: Swagger UI (vendored) over /api/openapi.json. A file, not an inline
// script, so the page runs under the same Content-Security-Policy as every other page.
"use strict";
window.addEventListener("DOMContentLoaded", () => {
  const root = document.getElementById("swagger-ui");
  window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    domNode: root,
    deepLinking: true,
    // the API authenticates with the session cookie (same origin) or HTTP Basic
    withCredentials: true,
  });
});
