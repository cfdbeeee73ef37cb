vcl 4.1;

# Varnish, malloc storage (rampart-bench). The builtin VCL does the rest: responses with
# Cache-Control no-store/no-cache/private or Set-Cookie become hit-for-miss, so they always reach
# the origin.

backend default {
    .host = "127.0.0.1";
    .port = "40229";
}

sub vcl_deliver {
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
