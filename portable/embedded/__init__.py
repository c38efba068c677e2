"""Zero-setup drivers: ``mem://`` and ``file://`` buckets, ``mem://`` and
``sqlite://`` queues, ``local://`` jobs. They need nothing installed and pass
every contract suite: they are the executable specification of the API."""
