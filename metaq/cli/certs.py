"""``metaq certs create --dir DIR [--host H ...] [--client-name CN] [--days N]``: a CA, a broker certificate
and a client certificate for trying TLS out (metaq/certs.py; the README's TLS quickstart uses them).

Prints what it wrote and the properties that use it, for a broker's ``server.properties`` and a client's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from metaq.cli.subparsers import SubParsers


def register(sub: SubParsers) -> None:
    parser = sub.add_parser("certs", help="make a CA, broker and client certificates for TLS (with openssl)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="a CA, a broker (server) and a client certificate in --dir")
    create.add_argument("--dir", type=Path, required=True, help="directory to write to (created; must hold no CA)")
    create.add_argument("--host", action="append", default=None, metavar="HOST",
                        help="a host name or address clients reach the broker by (repeatable; "
                             "default 127.0.0.1 and localhost)")
    create.add_argument("--client-name", default="client", metavar="CN",
                        help="the client certificate's CN (principal User:CN=<CN>,O=metaq; default client)")
    create.add_argument("--days", type=int, default=365, help="validity in days (default 365)")
    create.set_defaults(func=_create)


def _create(args: argparse.Namespace) -> int:
    from metaq.certs import DEFAULT_HOSTS, create_certificates

    made = create_certificates(args.dir, hosts=args.host or DEFAULT_HOSTS, client_name=args.client_name,
                               days=args.days)
    print(f"CA                  {made.ca}\n"
          f"broker certificate  {made.server_cert} (key {made.server_key})\n"
          f"client certificate  {made.client_cert} (key {made.client_key}; principal "
          f"User:CN={args.client_name},O=metaq)\n\n"
          f"# server.properties\nssl.certificate.location={made.server_cert}\n"
          f"ssl.key.location={made.server_key}\nssl.ca.location={made.ca}\n\n"
          f"# client properties (kcat -X, confluent-kafka, metaq --config)\nssl.ca.location={made.ca}")
    return 0
