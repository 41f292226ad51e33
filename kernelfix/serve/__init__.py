"""``kernelfix serve``: the judge as an authenticated HTTP service (docs/service.md).

``app`` the FastAPI app and its guard (token, body size), ``auth`` the token, ``client`` a
client for trainers. The warm judges and the queue behind it are ``kernelfix.library.judge_pool``.
"""
