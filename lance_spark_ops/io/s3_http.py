"""aiobotocore's HTTP session with one TLS verify context per process and CA setting (see
``s3_session``); a module of its own so that importing ``s3_session`` does not import aiobotocore."""

from __future__ import annotations

import threading
from typing import Any

from aiobotocore.httpsession import AIOHTTPSession

_LOCK = threading.Lock()
_CONTEXTS: dict[Any, Any] = {}  # verify setting -> its ssl.SSLContext


class SharedContextSession(AIOHTTPSession):
    """``AIOHTTPSession`` without a CA bundle parse per client; with a client certificate or a
    proxy, aiobotocore's own contexts."""

    def shared_verify_context(self) -> Any:
        """The context ``_build_verify_context`` makes for this session's CA setting, made once
        per process and setting (built, a context is only read: sharing it is safe)."""
        verify = self._verify
        key = verify if verify is None or isinstance(verify, (bool, str)) else repr(verify)
        with _LOCK:
            context = _CONTEXTS.get(key)
            if context is None:
                context = _CONTEXTS[key] = self._build_verify_context()
            return context

    def _build_ssl_contexts(self, proxy_url: Any) -> Any:
        if self._cert_file or proxy_url:
            return super()._build_ssl_contexts(proxy_url)
        return self.shared_verify_context(), None
