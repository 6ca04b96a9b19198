"""The elastic driver's listening sockets: one per interface the job's hosts reach this machine on. A job that
starts on this machine alone is served on 127.0.0.1; when discovery adds a remote host, the ranks spawned there
need an address on the route to it, so a second listener (same secret, same handlers) opens there and rank 0
hands its address to the processes it spawns (TFRING_ELASTIC_DRIVERS). Never a wildcard address."""
import threading

from tfring.common.signed_server import DriverServer


class Listeners:
    """DriverServers by bind address, opened on demand.

    Args:
        bind_address: callable([host]) -> the address of this machine's interface on the route to the hosts
            (raises RuntimeError when there is none).
        secret: the job's secret.
        handlers: {path: handler}, shared by every listener.
        log: where refusals and handler failures are written.
        clients: the most ranks the job may have (sizes each server's connection limits).
    """

    def __init__(self, bind_address, secret, handlers, log=None, clients=0):
        self._bind_address, self._secret, self._handlers, self._log = bind_address, secret, handlers, log
        self._clients = clients
        self._lock = threading.Lock()
        self._servers = {}

    def address_for(self, hosts):
        """The "host:port" the ranks on `hosts` reach the driver at, opening a listener if needed.

        Args:
            hosts: host names (the first remote one decides; all local: 127.0.0.1).

        Returns:
            str: "host:port".

        Raises:
            RuntimeError: no interface on the route to the hosts.
            OSError: the address cannot be bound.
        """
        bind = self._bind_address(list(hosts))
        with self._lock:
            if bind not in self._servers:
                self._servers[bind] = DriverServer(bind, self._secret, self._handlers, log=self._log,
                                                   clients=self._clients).start()
            return self._servers[bind].address

    def drivers_for(self, add):
        """{host: "host:port"} for the hosts of a growth offer; a host without a route is left out (its ranks
        then use the address they inherit).

        Args:
            add: [[host, n], ...].

        Returns:
            dict
        """
        drivers = {}
        for host, _ in add:
            try:
                drivers[host] = self.address_for([host])
            except (RuntimeError, OSError):
                pass
        return drivers

    def stop(self):
        """Closes every listener."""
        with self._lock:
            for server in self._servers.values():
                server.stop()
            self._servers.clear()
